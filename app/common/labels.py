"""What the dashboard calls things: one name for each algorithm and model, and one label for a run, used by every
page and panel."""

from typing import Any

from app.common.results import finite_epsilon
from cache import RunRecord, RunStatus

ALGORITHM_TITLES = {  # how an algorithm reads where it is chosen
    "dpsgd": "DP-SGD",
    "noisy_gd": "Noisy gradient descent",
    "nonprivate": "Non-private baseline",
    "aniso_dpsgd": "DP-SGD, anisotropic noise",
    "expmech_stumps": "Exponential mechanism: decision stumps",
    "sq_laplace": "SQ learning via Laplace noise",
    "rwm_online": "Private online learning: RWM",
    "rwm_linear": "Private linear learner",
}
ALGORITHM_NAMES = {  # how an algorithm reads inside a sentence
    "dpsgd": "DP-SGD",
    "noisy_gd": "noisy GD",
    "nonprivate": "non-private",
    "aniso_dpsgd": "anisotropic DP-SGD",
    "expmech_stumps": "exponential mechanism",
    "sq_laplace": "SQ via Laplace",
    "rwm_online": "private RWM",
    "rwm_linear": "private linear learner",
}
MODEL_TITLES = {"logreg": "Logistic regression", "mlp": "MLP (one ReLU hidden layer)", "cnn": "CNN (tanh)"}

IMPORTED_MARK = " · imported"  # ends the label of a run imported from an archive: computed elsewhere


def _number(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def run_label(run: RunRecord) -> str:
    """How a run reads in a selection (plain text): id, data/model, ε spent and accuracy (or its status), and
    whether it was imported."""
    base = f"{run.id} · {run.spec.get('dataset', '?')}/{run.spec.get('model', '?')}"
    mark = IMPORTED_MARK if run.imported else ""
    result = run.result if isinstance(run.result, dict) else None
    if result is None:
        return f"{base} · {run.status.value}{mark}"
    delta = run.spec.get("delta")
    private = isinstance(delta, int | float) and not isinstance(delta, bool) and delta != 0
    shown_epsilon = _number(finite_epsilon(run), ".2f") if private else "∞ (non-private)"
    status = "" if run.status is RunStatus.FINISHED else f" · {run.status.value}"
    return f"{base} · ε {shown_epsilon} · acc {_number(result.get('test_accuracy'), '.3f')}{status}{mark}"

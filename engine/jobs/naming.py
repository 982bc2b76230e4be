"""Readable names for runs and sweeps, generated from what sets them apart when the user gave none.

A run reads as its data, model, what sets its privacy (the target ε, else σ; "non-private" for a baseline),
the algorithm when it is not DP-SGD, and its seed: "digits · logreg · σ 1.65 · seed 0". A sweep reads as its
base's data and model and the keys of its grid: "mnist · cnn · noise_multiplier × lot_size". The id stays the
record's key; a name is for people and need not be unique. Pure functions of a spec: no store access.
"""

from collections.abc import Mapping
from typing import Any

from engine.training.datasets.tabular_csv import CSV_PREFIX

ALGORITHM_SHORT = {  # the algorithm as a name part, for every algorithm but DP-SGD (the default: not named)
    "noisy_gd": "noisy GD",
    "aniso_dpsgd": "anisotropic DP-SGD",
    "expmech_stumps": "exp. mechanism",
    "sq_laplace": "SQ Laplace",
    "rwm_online": "RWM",
    "rwm_linear": "linear learner",
}
SEPARATOR = " · "
UPLOAD_TITLE = "uploaded CSV"  # an upload's part when its own label is not known here: never its path


def _dataset(dataset: Any, title: str | None) -> str:
    """The dataset as a name part: `title` when given, a registered dataset by its name, an upload generically."""
    if title:
        return title
    if not isinstance(dataset, str):
        return "?"
    return UPLOAD_TITLE if dataset.startswith(CSV_PREFIX) else dataset


def _number(value: Any) -> str | None:
    """A number as a name part: whole numbers in full (a search's ten-digit seed), others to 3 significant
    digits; None for anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.3g}"


def generated_run_name(spec: Mapping[str, Any], *, dataset_title: str | None = None) -> str:
    """A run's name from its spec (`dataset_title`: how its dataset reads, e.g. an upload's label)."""
    parts = [_dataset(spec.get("dataset"), dataset_title)]
    model = spec.get("model")
    parts.append(model if isinstance(model, str) else "?")
    algorithm = spec.get("algorithm")
    if algorithm == "nonprivate" or (not spec.get("delta") and algorithm in (None, "dpsgd", "nonprivate")):
        parts.append("non-private")
    else:
        if isinstance(algorithm, str) and algorithm != "dpsgd":
            parts.append(ALGORITHM_SHORT.get(algorithm, algorithm))
        if (epsilon := _number(spec.get("target_epsilon"))) is not None:
            parts.append(f"ε {epsilon}")
        elif (sigma := _number(spec.get("noise_multiplier"))) is not None:
            parts.append(f"σ {sigma}")
    if (seed := _number(spec.get("seed"))) is not None:
        parts.append(f"seed {seed}")
    return SEPARATOR.join(parts)


def generated_sweep_name(sweep_spec: Mapping[str, Any], *, dataset_title: str | None = None) -> str:
    """A sweep's name from its grid spec: its base's data and model, and the keys its grid varies."""
    base = sweep_spec.get("base") if isinstance(sweep_spec.get("base"), Mapping) else {}
    model = base.get("model")
    grid = sweep_spec.get("grid") if isinstance(sweep_spec.get("grid"), Mapping) else {}
    parts = [_dataset(base.get("dataset"), dataset_title), model if isinstance(model, str) else "?"]
    if grid:
        parts.append(" × ".join(str(key) for key in grid))
    if isinstance(sweep_spec.get("search"), Mapping):
        parts.append("private search")
    return SEPARATOR.join(parts)

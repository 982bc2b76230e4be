"""What the dashboard calls things: the title of each algorithm (the engine's catalogue, `algorithm_title`, and
inside a sentence `algorithm_name`) and model (the engine's model registry, `model_title`), each falling back to the
name itself for one the engine does not know, and one label for a run, used by every page and panel."""

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from app import services
from app.common.cells import table_cell
from app.common.results import finite_epsilon
from cache import RunRecord, RunStatus, SweepRecord
from engine.jobs.naming import generated_run_name, generated_sweep_name
from engine.training.config.catalogue import ALGORITHMS, algorithm_title
from engine.training.config.catalogue import algorithm_phrase as algorithm_name
from engine.training.models.registry import MODELS, model_title

SWEEP_MODELS = ("logreg", "mlp")  # the models a sweep base offers


def algorithm_titles() -> dict[str, str]:
    """Every algorithm the engine's catalogue has, in its order, with the title it reads by where it is chosen."""
    return {name: algorithm_title(name) for name in ALGORITHMS}


def model_titles(names: Sequence[str] | None = None) -> dict[str, str]:
    """The named models (default: every registered one, in the registry's order) with their titles."""
    return {name: model_title(name) for name in (MODELS if names is None else names)}


IMPORTED_MARK = " · imported"  # marks the label of a run imported from an archive: computed elsewhere


def _number(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def run_name(run: RunRecord) -> str:
    """A run's readable name: the one the user gave it, else one generated from its spec ("digits · logreg ·
    σ 1.65 · seed 0"). The id stays available as secondary detail (`run_label`, tooltips, the Runs page)."""
    given = services.run_names().get(run.id)
    return given or generated_run_name(run.spec, dataset_title=dataset_label(run.spec.get("dataset")))


def sweep_name(sweep: SweepRecord) -> str:
    """A sweep's readable name: the one it was launched with, else one generated from its grid."""
    base = sweep.spec.get("base") if isinstance(sweep.spec.get("base"), dict) else {}
    title = dataset_label(base["dataset"]) if "dataset" in base else None
    return sweep.name or generated_sweep_name(sweep.spec, dataset_title=title)


def run_label(run: RunRecord) -> str:
    """How a run reads in a selection (plain text): its name, ε spent and accuracy (or its status), whether it was
    imported, and last its id."""
    base = run_name(run)
    mark = IMPORTED_MARK if run.imported else ""
    result = run.result if isinstance(run.result, dict) else None
    if result is None:
        return f"{base} · {run.status.value}{mark} · {run.id}"
    shown_epsilon = _number(finite_epsilon(run), ".2f") if is_private(run.spec) else "∞ (non-private)"
    status = "" if run.status is RunStatus.FINISHED else f" · {run.status.value}"
    return f"{base} · ε {shown_epsilon} · acc {_number(result.get('test_accuracy'), '.3f')}{status}{mark} · {run.id}"


def is_private(spec: dict[str, Any]) -> bool:
    """A private run: its spec has a nonzero δ (a non-private baseline has none)."""
    delta = spec.get("delta")
    return isinstance(delta, int | float) and not isinstance(delta, bool) and delta != 0


def dataset_label(dataset: Any) -> str:
    """A spec's dataset as the user knows it (an upload by its own label); '?' for a value of another type."""
    return services.dataset_name(dataset) if isinstance(dataset, str) else "?"


SPEC_SYMBOLS = {  # how a spec key reads in a run's short label, in the order the label lists them
    "dataset": "",
    "model": "",
    "algorithm": "",
    "target_epsilon": "ε",
    "noise_multiplier": "σ",
    "delta": "δ",
    "clip_norm": "C",
    "lot_size": "L",
    "epochs": "ep",
    "lr": "lr",
    "hidden": "hidden",
    "pca_dims": "PCA",
    "seed": "seed",
}
MAX_LABEL_PARTS = 6


def spec_part(key: str, value: Any) -> str:
    """One spec value in a run's short label: "ε 3", "L 64", "20 ep", "mnist", "noise release"."""
    if key == "dataset":
        return dataset_label(value)
    if key == "algorithm" and isinstance(value, str):
        return algorithm_name(value)
    if isinstance(value, int) and not isinstance(value, bool):
        shown = str(value)  # a seed of a search has ten digits: never "8.11929e+08"
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:
        shown = str(table_cell(value))
    symbol = SPEC_SYMBOLS.get(key, key)
    if key == "epochs":
        return f"{shown} ep"
    return f"{symbol} {shown}".strip()


def short_labels(runs: Sequence[RunRecord]) -> dict[str, str]:
    """A readable label per run: the name the user gave it, else what sets it apart from the others ("ε 3 · L 64 ·
    20 ep"); runs that agree on everything shown also carry their id. A run alone is labelled by its data, model
    and budget."""
    keys = {key for run in runs for key in run.spec}
    differing = [k for k in keys if len({json.dumps(run.spec.get(k), sort_keys=True, default=str) for run in runs}) > 1]
    order = list(SPEC_SYMBOLS)
    differing.sort(key=lambda k: (order.index(k) if k in order else len(order), k))
    shown = differing[:MAX_LABEL_PARTS] or ["dataset", "model", "target_epsilon", "noise_multiplier"]
    names = services.run_names()  # a name the user gave a run is its label
    labels = {
        run.id: names.get(run.id) or " · ".join(spec_part(k, run.spec[k]) for k in shown if k in run.spec)
        for run in runs
    }
    counts = Counter(labels.values())
    return {
        run_id: label if label and counts[label] == 1 else " · ".join(filter(None, (label, run_id)))
        for run_id, label in labels.items()
    }

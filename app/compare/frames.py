"""The Compare page's data: filtering runs, their labels, the table of every hyperparameter and result
(and its CSV), and the frontier points of a selection. Pure functions."""

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from app.common.cells import table_cell
from app.common.labels import dataset_label, run_label, run_name
from app.common.results import finite_accuracy, finite_epsilon
from app.common.safe_text import csv_bytes, timestamp_text
from cache import RunRecord, RunStatus
from engine.metric_names import epsilon_metric, is_epsilon_metric
from engine.privacy import epsilon_text, is_unbounded
from engine.training.config.keys import ALL_KEYS

FILTERS = {  # filter label → the run attribute it filters on
    "Dataset": lambda run: dataset_label(run.spec.get("dataset")),
    "Model": lambda run: str(run.spec.get("model", "?")),
    "Algorithm": lambda run: str(run.spec.get("algorithm", "?")),
    "Status": lambda run: run.status.value,
}
FIRST_SPEC_KEYS = ("dataset", "model", "algorithm")
HEADLINE = ("epsilon", "test_accuracy")  # result fields shown right after what a run trained
# Result fields that repeat a spec key get a name of their own; long text stays on the run's page.
RESULT_NAMES = {
    "noise_multiplier": "noise_multiplier_used",
    "delta": "delta_used",
    "algorithm": None,
    "private": None,
    "privacy_statement": None,
    "epsilons": None,
}


def filter_options(runs: Sequence[RunRecord]) -> dict[str, list[str]]:
    """The values each filter can take among `runs`, sorted (every status, always)."""
    options = {name: sorted({value(run) for run in runs}) for name, value in FILTERS.items()}
    options["Status"] = [status.value for status in RunStatus]
    return options


def filter_runs(runs: Iterable[RunRecord], chosen: dict[str, Sequence[str]]) -> list[RunRecord]:
    """The runs matching every filter; an empty filter matches everything."""
    return [run for run in runs if all(not want or FILTERS[name](run) in want for name, want in chosen.items())]


def _epsilon_cell(value: Any) -> Any:
    """An accountant's ε as a cell: inf where there is no finite bound (not 1.8e308)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return math.inf if is_unbounded(value) else value
    return table_cell(value)


def epsilons_as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: an ε column (`epsilon`, `epsilon_<accountant>`) that holds an unbounded value reads ∞
    there, as text (its finite values to 4 significant digits); every other column, and the CSV, keep numbers."""
    shown = frame.copy()
    for column in frame.columns:
        if not is_epsilon_metric(str(column)):
            continue
        numbers = [v for v in frame[column] if isinstance(v, int | float) and not isinstance(v, bool)]
        if any(math.isinf(v) for v in numbers):
            shown[column] = [cell_text(v) for v in frame[column]]
    return shown


def cell_text(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "" if math.isnan(value) else epsilon_text(value, ".4g")
    return "" if value is None else value


OWN_COLUMNS = ("name", "run", "status", "imported", "created", "engine_version", "error")


def comparison_table(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """One row per run: its readable name, id, status, whether it was imported, data, model and algorithm, the
    headline results (ε spent, test accuracy), every other spec key any of them has (this engine's in the spec's
    order, then any other), every other result field (the ε of each accountant as `epsilon_<name>`), then when
    and by which engine it ran. A field a record holds under a name the table already uses is left out."""
    known = (*FIRST_SPEC_KEYS, *ALL_KEYS)
    others = sorted({k for run in runs for k in run.spec if k not in known and k not in (*OWN_COLUMNS, *HEADLINE)})
    spec_keys = [*dict.fromkeys(k for k in known if any(k in run.spec for run in runs)), *others]
    rows = []
    for run in runs:
        result = run.result if isinstance(run.result, dict) else {}
        row: dict[str, Any] = {"name": run_name(run), "run": run.id, "status": run.status.value}
        row["imported"] = run.imported
        row |= {key: table_cell(run.spec.get(key)) for key in spec_keys if key in FIRST_SPEC_KEYS}
        row["dataset"] = dataset_label(run.spec.get("dataset"))
        row |= {key: table_cell(result.get(key)) for key in HEADLINE}
        row |= {key: table_cell(run.spec.get(key)) for key in spec_keys if key not in FIRST_SPEC_KEYS}
        for key, value in result.items():
            name = RESULT_NAMES.get(key, key)
            if name is not None and key not in HEADLINE and name not in row and name not in OWN_COLUMNS:
                row[name] = table_cell(value)
        epsilons = result.get("epsilons")
        row |= {
            epsilon_metric(name): _epsilon_cell(value)
            for name, value in sorted((epsilons if isinstance(epsilons, dict) else {}).items())
        }
        row |= {
            "created": timestamp_text(run.created_at),
            "engine_version": run.engine_version,
            "error": run.error or "",
        }
        rows.append(row)
    return pd.DataFrame(rows)


def differing_columns(table: pd.DataFrame, *, keep: Sequence[str] = ("name", "run")) -> pd.DataFrame:
    """The table without the columns every row agrees on (`keep` stays)."""
    varies = [c for c in table.columns if c in keep or table[c].astype(str).nunique(dropna=False) > 1]
    return table[varies]


def table_csv(table: pd.DataFrame) -> bytes:
    """The table as CSV, a cell a spreadsheet would run as a formula made text (`safe_text.csv_cell`)."""
    return csv_bytes(table)


def frontier_points(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """The finished private runs as (run, ε spent, test accuracy, audited ε̂ or NaN); the others have no point."""
    rows = [
        {
            "run": run.id,
            "epsilon": epsilon,
            "accuracy": accuracy,
            "label": run_label(run),
            "audited": audited_epsilon(run),
        }
        for run in runs
        if (epsilon := finite_epsilon(run)) is not None and (accuracy := finite_accuracy(run)) is not None
    ]
    return pd.DataFrame(rows, columns=["run", "epsilon", "accuracy", "label", "audited"])


def audited_epsilon(run: RunRecord) -> float:
    """A run's audited lower bound ε̂ (`result.audit.epsilon`), NaN when it was not audited."""
    audit = (run.result or {}).get("audit")
    value = audit.get("epsilon") if isinstance(audit, dict) else None
    usable = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if usable else math.nan

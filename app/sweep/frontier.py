"""A sweep's results as data frames: its progress, its runs, and the privacy–utility frontier
(ε spent against test accuracy, aggregated over seeds per grid point). Pure functions."""

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from app.common.cells import table_cell
from app.common.results import duration_text, finite_accuracy, finite_epsilon
from app.sweep.grid import label
from cache import RunRecord, RunStatus, SweepRecord

SPREADS = {"minmax": "min–max over seeds", "std": "mean ± 1 std over seeds"}
# The frontier's own columns: a grid key of one of these names (a sweep made elsewhere) is not drawn.
FRONTIER_COLUMNS = frozenset({"seed", "run", "epsilon", "accuracy", "low", "high", "std", "seeds"})


def _grid(sweep: SweepRecord) -> dict[str, Any]:
    grid = sweep.spec.get("grid") if isinstance(sweep.spec, dict) else None
    return grid if isinstance(grid, dict) else {}


def parameters(sweep: SweepRecord) -> list[str]:
    """The swept spec keys, in grid order (the first varies along each line, the second picks the line)."""
    return [key for key in _grid(sweep) if isinstance(key, str) and key not in FRONTIER_COLUMNS]


def series_values(sweep: SweepRecord, parameter: str) -> list[Any]:
    """A swept parameter's values in grid order, as they appear in the frontier's frames."""
    values = _grid(sweep).get(parameter, [])
    return list(dict.fromkeys(table_cell(value) for value in values)) if isinstance(values, list) else []


def progress(runs: Sequence[RunRecord]) -> Counter:
    return Counter(run.status for run in runs)


def step_fraction(runs: Sequence[RunRecord], planned_steps: Mapping[str, int]) -> float:
    """How far a sweep is, by steps: the steps its runs took over the steps they plan (a queued run's from
    `planned_steps`, run id → its plan's steps, until a worker records its own). A run that ended (finished, failed,
    cancelled) counts all its steps: nothing is left to do there. 0 while nothing is known."""
    done = total = 0
    for run in runs:
        steps = run.total_steps or planned_steps.get(run.id, 0)
        total += steps
        done += steps if not run.status.active else min(run.progress_step, steps)
    return done / total if total else 0.0


LOG_AXIS_SPAN = 10  # planned ε from the grid's lowest to its highest at least this many times apart: a log ε axis


def log_epsilon_axis(planned_epsilons: Sequence[float | None]) -> bool:
    """Whether the frontier's ε axis is logarithmic, from the ε each run of the grid plans to spend (None where
    it cannot be planned): decided before any run has a point, so the axis keeps its type while the sweep trains
    and after it finishes."""
    known = [e for e in planned_epsilons if e is not None and 0 < e < math.inf]
    return bool(known) and max(known) / min(known) >= LOG_AXIS_SPAN


def progress_text(runs: Sequence[RunRecord]) -> str:
    counts = progress(runs)
    parts = [f"{counts[RunStatus.FINISHED]} / {len(runs)} finished"]
    parts += [
        f"{counts[s]} {s.value}"
        for s in (RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.FAILED, RunStatus.CANCELLED)
        if counts[s]
    ]
    return " · ".join(parts)


def grid_table(
    sweep: SweepRecord,
    runs: Mapping[str, RunRecord],
    live: Mapping[str, tuple[float | None, float | None]] | None = None,
    names: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Every run of the sweep in grid order: its name (from `names`, run id → readable name), point, status,
    progress and result; a running run's ε and test accuracy so far from `live` (run id → (ε by RDP after the
    steps taken, latest test accuracy))."""
    rows, live, names = [], live or {}, names or {}
    for run_id, point in zip(sweep.run_ids, sweep.points, strict=True):
        run = runs.get(run_id)
        result = (run.result or {}) if run else {}
        epsilon_so_far, accuracy_so_far = live.get(run_id, (None, None))
        row: dict[str, Any] = {"name": names.get(run_id, ""), "run": run_id}
        row["status"] = run.status.value if run else "deleted"
        row |= {label(key): table_cell(value) for key, value in (point.items() if isinstance(point, dict) else ())}
        row |= {
            "ε spent": (finite_epsilon(run) if run else None) if run_id not in live else epsilon_so_far,
            "test accuracy": result.get("test_accuracy") if run_id not in live else accuracy_so_far,
            "steps": f"{run.progress_step}/{run.total_steps or '?'}" if run else "",
            "error": (run.error or "") if run else "",
        }
        rows.append(row)
    return pd.DataFrame(rows)


def finished_points(
    sweep: SweepRecord, runs: Mapping[str, RunRecord], *, status: RunStatus = RunStatus.FINISHED
) -> pd.DataFrame:
    """One row per private run of `status` with a result (FINISHED, or CANCELLED: stopped by a cancel after it
    had taken steps): its grid values, seed, ε spent and test accuracy."""
    columns = [*parameters(sweep), "seed", "run", "epsilon", "accuracy"]
    rows = []
    for run_id, point in zip(sweep.run_ids, sweep.points, strict=True):
        run = runs.get(run_id)
        if run is None or run.status is not status:
            continue
        epsilon, accuracy = finite_epsilon(run), finite_accuracy(run)
        if epsilon is None or accuracy is None:
            continue
        point = point if isinstance(point, dict) else {}
        values = {key: table_cell(point.get(key)) for key in parameters(sweep)}
        rows.append(
            {**values, "seed": table_cell(point.get("seed")), "run": run_id, "epsilon": epsilon, "accuracy": accuracy}
        )
    return pd.DataFrame(rows, columns=columns)


def running_points(sweep: SweepRecord, live: Mapping[str, tuple[float | None, float | None]]) -> pd.DataFrame:
    """One row per running run with an ε and a test accuracy so far (`live`: run id → (ε by RDP after the steps
    taken, latest test accuracy)): its grid values, run, ε and accuracy so far, for the frontier's open markers."""
    columns = [*parameters(sweep), "run", "epsilon", "accuracy"]
    rows = []
    for run_id, point in zip(sweep.run_ids, sweep.points, strict=True):
        epsilon, accuracy = live.get(run_id, (None, None))
        if epsilon is None or accuracy is None:
            continue
        point = point if isinstance(point, dict) else {}
        values = {key: table_cell(point.get(key)) for key in parameters(sweep)}
        rows.append({**values, "run": run_id, "epsilon": epsilon, "accuracy": accuracy})
    return pd.DataFrame(rows, columns=columns)


def frontier(points: pd.DataFrame, params: Sequence[str], *, spread: str = "minmax") -> pd.DataFrame:
    """Per grid point: ε = the largest over its seeds (a valid bound for each of them), mean accuracy
    with `low`/`high` (min–max, or mean ± std), and how many seeds finished."""
    keys = list(params)
    columns = [*keys, "epsilon", "accuracy", "low", "high", "seeds"]
    if points.empty:
        return pd.DataFrame(columns=columns)
    grouped = points.groupby(keys, sort=False, dropna=False)
    out = grouped.agg(
        epsilon=("epsilon", "max"),
        accuracy=("accuracy", "mean"),
        low=("accuracy", "min"),
        high=("accuracy", "max"),
        std=("accuracy", "std"),
        seeds=("run", "count"),
    ).reset_index()
    if spread == "std":
        std = out["std"].fillna(0.0)
        out["low"], out["high"] = out["accuracy"] - std, out["accuracy"] + std
    return out[columns].sort_values("epsilon", kind="stable").reset_index(drop=True)


def latest_values(frame: pd.DataFrame) -> tuple[float | None, float | None]:
    """A running run's ε so far (RDP, the live accountant) and its latest test accuracy, from its metrics."""

    def last(column: str) -> float | None:
        values = frame[column].dropna() if column in frame else pd.Series(dtype=float)
        value = float(values.iloc[-1]) if len(values) else None
        return value if value is not None and math.isfinite(value) else None

    return last("epsilon"), last("test_accuracy")


def eta_text(runs: Sequence[RunRecord], now: float) -> str | None:
    """Steps done of the sweep's planned steps and the time left at the pace so far (None before any step)."""
    planned = sum(run.total_steps or 0 for run in runs)
    done = sum(min(run.progress_step, run.total_steps or 0) for run in runs if not run.status.active or run.started_at)
    started = [run.started_at for run in runs if run.started_at]
    if not planned or not done or not started:
        return None
    elapsed = max(now - min(started), 1e-9)
    left = (planned - done) * elapsed / done
    return f"{done:,} / {planned:,} steps · about {duration_text(left)} left at the pace so far"

"""The lab from a notebook: plan a run, calibrate σ, account a ledger, train, queue, and read runs and their
metrics as pandas frames. Each is a thin shell over the engine function the CLI calls for the same thing
(`parse_spec`/`plan_spec`, `calibrate_noise_multiplier`, the accountants' `panel`, `train`, the queue's
`submit`), so a notebook sees the very same numbers; `metrics` is the frame the dashboard's pages plot.

    import engine
    plan = engine.plan({"dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3.0,
                        "delta": 1e-5, "clip_norm": 1.0, "lot_size": 64, "epochs": 20, "lr": 2.0, "seed": 0})
    engine.epsilons(plan.ledger(), delta=plan.delta)      # {"rdp": 3.0, "pld": 2.74, ...}
    run_id = engine.submit(spec)                           # a worker (make run) trains it
    engine.metrics(run_id)                                 # one row per step, one column per metric

Every spec is validated as the CLI validates it (`SpecError` names the field and the allowed range).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from cache import RunRecord, Store, store_path
from engine.jobs.settings import default_data_dirs
from engine.jobs.submission import submit as queue_spec
from engine.privacy import PrivacyLedger, calibrate_noise_multiplier, panel
from engine.training import RunSpec, TrainingPlan, TrainResult, parse_spec, plan_spec
from engine.training import train as train_spec

RUN_COLUMNS = (
    "id",
    "status",
    "dataset",
    "model",
    "algorithm",
    "epsilon",
    "test_accuracy",
    "created_at",
    "finished_at",
    "imported",
)


def spec(raw: Mapping[str, Any] | RunSpec) -> RunSpec:
    """A validated run spec (a `RunSpec` passes through)."""
    return raw if isinstance(raw, RunSpec) else parse_spec(raw)


def plan(raw: Mapping[str, Any] | RunSpec) -> TrainingPlan:
    """The plan of a spec on its dataset's public size: steps, q, σ (calibrated for a target ε) and `ledger()`."""
    return plan_spec(spec(raw))


def calibrate(
    *, target_epsilon: float, delta: float, sampling_rate: float, steps: int, accountant: str = "pld"
) -> float:
    """The smallest σ of a Poisson DP-SGD schedule whose ε by `accountant` meets (target_epsilon, δ)."""
    return calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps, accountant_name=accountant
    )


def epsilons(ledger: PrivacyLedger, *, delta: float, accountants: Sequence[str] | None = None) -> dict:
    """Final ε of a ledger by each applicable accountant (default: every registered one; the tightest is the
    minimum; none is ever 0 for ∞)."""
    return panel(ledger, delta=delta, names=None if accountants is None else tuple(accountants)).final()


def train(raw: Mapping[str, Any] | RunSpec, *, data_dirs: Sequence[Path] | None = None) -> TrainResult:
    """Train a spec in this process (no store): the result the CLI's `train` prints."""
    dirs = list(data_dirs) if data_dirs is not None else default_data_dirs()
    return train_spec(spec(raw), data_dirs=dirs)


def open_store(path: Path | str | None = None) -> Store:
    """The run store: the data home's (`DPLAB_HOME`) unless a path is given."""
    return Store(path or store_path())


def submit(raw: Mapping[str, Any] | RunSpec, *, store: Store | None = None, force: bool = False) -> str:
    """Queue a spec for the workers (or answer it from the result cache); returns the run id."""
    return queue_spec(store or open_store(), spec(raw), force=force).run_id


def runs_frame(records: Sequence[RunRecord]) -> pd.DataFrame:
    """One row per run: what it trained and what it reported (ε is the tightest accountant's)."""
    rows = []
    for run in records:
        result = run.result or {}
        trained = {key: run.spec.get(key) for key in ("dataset", "model", "algorithm")}
        reported = {key: result.get(key) for key in ("epsilon", "test_accuracy")}
        rows.append(
            {
                "id": run.id,
                "status": run.status.value,
                **trained,
                **reported,
                "created_at": run.created_at,
                "finished_at": run.finished_at,
                "imported": run.imported,
            }
        )
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


def runs(*, store: Store | None = None, limit: int = 1000) -> pd.DataFrame:
    """The store's runs, newest first."""
    return runs_frame((store or open_store()).list_runs(limit=limit))


def metrics_frame(rows: Sequence[tuple[int, str, float]]) -> pd.DataFrame:
    """Metric rows (step, name, value) as one row per step and one column per metric."""
    if not rows:
        return pd.DataFrame({"step": pd.Series(dtype=int)})
    long = pd.DataFrame(rows, columns=["step", "name", "value"])
    return long.pivot(index="step", columns="name", values="value").reset_index()


def metrics(run_id: str, *, store: Store | None = None) -> pd.DataFrame:
    """A run's per-step metrics (ε by accountant, test accuracy, and the private diagnostics, which no ε covers:
    keep them in the lab)."""
    return metrics_frame((store or open_store()).metrics(run_id))


__all__ = [
    "calibrate",
    "epsilons",
    "metrics",
    "metrics_frame",
    "open_store",
    "plan",
    "runs",
    "runs_frame",
    "spec",
    "submit",
    "train",
]

"""Store access and every Streamlit cache decorator of the app, in one place.

Reads never wait on a worker: SQLite in WAL mode lets the dashboard read while workers write.
"""

import json
import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from cache import RunRecord, RunStatus, Store, StoreError, store_path
from engine.jobs.queue import Submission, submit
from engine.jobs.settings import stale_after_s
from engine.privacy import PrivacyError, rdp_curve
from engine.training import DatasetError, SpecError, parse_spec, plan_spec


def get_store() -> Store:
    return _store_at(str(store_path()))


@st.cache_resource
def _store_at(path: str) -> Store:
    return Store(path)


@dataclass(frozen=True)
class PlanPreview:
    """What a spec implies before anything trains, or the error that stops it from training."""

    error: str | None = None
    steps: int = 0
    sampling_rate: float = 0.0
    noise_multiplier: float = 0.0
    epsilon: float = 0.0
    best_order: float = 0.0
    n_train: int = 0
    private: bool = True


@st.cache_data(show_spinner="Calibrating σ…", max_entries=512)
def preview_plan(spec_json: str) -> PlanPreview:
    try:
        spec = parse_spec(json.loads(spec_json))
        plan = plan_spec(spec)
        if not plan.private:
            return PlanPreview(steps=plan.steps, sampling_rate=plan.sampling_rate, n_train=plan.n_train, private=False)
        rdp = rdp_curve(plan.ledger(), delta=plan.delta, steps=[plan.steps])
        eps, order = rdp.final_epsilon, rdp.final_order
    except (SpecError, DatasetError, PrivacyError) as exc:
        return PlanPreview(error=str(exc))
    return PlanPreview(
        steps=plan.steps,
        sampling_rate=plan.sampling_rate,
        noise_multiplier=plan.noise_multiplier,
        epsilon=eps,
        best_order=order,
        n_train=plan.n_train,
    )


def submit_spec(raw: dict) -> Submission:
    return submit(get_store(), parse_spec(raw))


def get_run(run_id: str) -> RunRecord | None:
    try:
        return get_store().get_run(run_id)
    except StoreError:
        return None


def recent_runs(limit: int = 200) -> list[RunRecord]:
    return get_store().list_runs(limit=limit)


def latest_active_run() -> RunRecord | None:
    active = get_store().list_runs(limit=1, statuses=[RunStatus.RUNNING, RunStatus.QUEUED])
    return active[0] if active else None


def worker_health() -> list[dict]:
    """Workers registered as running, with the age of their last heartbeat and whether it is stale."""
    now, stale = time.time(), stale_after_s()
    return [
        {"worker": w.name, "backend": w.backend, "device": w.device or "", "current run": w.current_run or "",
         "last heartbeat": f"{now - w.heartbeat_at:.0f} s ago", "healthy": w.alive(now=now, stale_after_s=stale)}
        for w in get_store().list_workers()
    ]  # fmt: skip


def heartbeat_age(run: RunRecord) -> float | None:
    """Seconds since a running run's worker last reported, None for runs that are not running."""
    if run.status is not RunStatus.RUNNING or run.heartbeat_at is None:
        return None
    return time.time() - run.heartbeat_at


def cancel_run(run_id: str) -> RunStatus:
    return get_store().request_cancel(run_id)


def metrics_frame(run_id: str) -> pd.DataFrame:
    """Per-step metrics of a run, one row per step, one column per metric."""
    rows = get_store().metrics(run_id)
    if not rows:
        return pd.DataFrame({"step": pd.Series(dtype=int)})
    long = pd.DataFrame(rows, columns=["step", "name", "value"])
    return long.pivot(index="step", columns="name", values="value").reset_index()

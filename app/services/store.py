"""Store access: the one Store of the app (a cached resource) and reads of single runs.

Reads never wait on a worker: SQLite in WAL mode lets the dashboard read while workers write. A store that
cannot be used (damaged, not a store, read-only, a full disk, a newer schema) raises its named
`StoreUnusable`, which the entry page shows as one error instead of the page (`app/main.py`).
"""

import time

import pandas as pd
import streamlit as st

from cache import RunRecord, RunStatus, Store, StoreError, StoreUnusable, store_path
from engine import api
from engine.jobs.settings import stale_after_s
from engine.training.config.text import text_problem


def get_store() -> Store:
    return _store_at(str(store_path()))


@st.cache_resource
def _store_at(path: str) -> Store:
    return Store(path)


def get_run(run_id: str) -> RunRecord | None:
    try:
        return get_store().get_run(run_id)
    except StoreUnusable:
        raise
    except StoreError:  # no such run
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
        {
            "worker": w.name,
            "backend": w.backend,
            "device": w.device or "",
            "current run": w.current_run or "",
            "last heartbeat": f"{now - w.heartbeat_at:.0f} s ago",
            "healthy": w.alive(now=now, stale_after_s=stale),
        }
        for w in get_store().list_workers()
    ]


def heartbeat_age(run: RunRecord) -> float | None:
    """Seconds since a running run's worker last reported, None for runs that are not running."""
    if run.status is not RunStatus.RUNNING or run.heartbeat_at is None:
        return None
    return time.time() - run.heartbeat_at


def cancel_run(run_id: str) -> RunStatus:
    return get_store().request_cancel(run_id)


def metrics_frame(run_id: str) -> pd.DataFrame:
    """Per-step metrics of a run, one row per step, one column per metric (the notebook API's frame)."""
    return api.metrics(run_id, store=get_store())


def run_names() -> dict[str, str]:
    """The names users gave their runs, by run id (read at most every 2 s; a rename or an import clears it at
    once)."""
    return _run_names_at(str(store_path()))


@st.cache_data(ttl=2, show_spinner=False)
def _run_names_at(path: str) -> dict[str, str]:
    """The names of the store at `path` (the key: another data home never reads this one's names)."""
    return _store_at(path).run_names()


def forget_run_names() -> None:
    """Read the names again on their next use (after they changed)."""
    _run_names_at.clear()


def set_run_name(run_id: str, name: str) -> str:
    """Name a run (an empty name removes it); StoreError for a name over the limit, with a NUL or an unpaired
    surrogate (the text rule of every spec field), or an unknown run."""
    if (problem := text_problem(name)) is not None:
        raise StoreError(f"name: {problem}")
    kept = get_store().set_run_name(run_id, name)
    forget_run_names()
    return kept

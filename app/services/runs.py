"""The Runs page's services: counts, queue, history, transfer."""

from dataclasses import dataclass

import streamlit as st

from app.services.store import forget_run_names, get_store
from cache import RunEvent, RunRecord, RunStatus
from cache.archive.format import ArchiveError
from cache.store.maintenance import size_report
from engine.jobs.transfer import Export, ImportReport, import_runs, prepare_export, summarize_archive


def run_counts() -> dict[str, int]:
    """How many runs the store holds in each status, zeros included."""
    counts = size_report(get_store(), largest=0).runs_by_status
    return {status.value: counts.get(status.value, 0) for status in RunStatus}


def runs_with_status(statuses: list[RunStatus], limit: int = 200) -> list[RunRecord]:
    """The newest runs in one of `statuses`."""
    return get_store().list_runs(limit=limit, statuses=statuses)


def queue_order() -> list[RunRecord]:
    """Running runs, then queued runs in the order workers claim them (oldest first)."""
    store = get_store()
    running = store.list_runs(limit=100_000, statuses=[RunStatus.RUNNING])
    queued = store.list_runs(limit=100_000, statuses=[RunStatus.QUEUED])
    return [*reversed(running), *reversed(queued)]


def run_history(run_id: str) -> list[RunEvent]:
    """A run's status changes, oldest first."""
    return get_store().events(run_id)


def cancel_runs(run_ids: list[str]) -> list[RunStatus]:
    """Cancel each run: a queued one at once (CANCELLED), a running one at its next step (RUNNING, flagged);
    a run that already ended keeps its status. Returns each run's status after the request (StoreError for
    an unknown id)."""
    store = get_store()
    return [store.request_cancel(run_id) for run_id in run_ids]


def export_run_archive(
    run_ids: list[str], include_metrics: bool = True, include_private_diagnostics: bool = False
) -> Export:
    """A zip archive of the finished, failed and cancelled runs among `run_ids` (ArchiveError, StoreError): their
    released values only, unless the user opted in to the diagnostics computed on private training data."""
    return prepare_export(
        get_store(), run_ids, include_metrics=include_metrics, include_private_diagnostics=include_private_diagnostics
    )


@dataclass(frozen=True)
class ArchivePreview:
    """What an uploaded run archive holds, or why it cannot be imported."""

    error: str | None = None
    run_ids: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    sweeps: int = 0
    engine_version: str = ""
    created_at: float = 0.0
    includes_metrics: bool = False
    private_diagnostics: bool = False  # the archive holds values computed on private training data


@st.cache_data(show_spinner="Reading the archive…", max_entries=2)
def preview_run_archive(data: bytes) -> ArchivePreview:
    """The archive read and validated in full (every run as an import checks it), without touching the store."""
    try:
        summary = summarize_archive(data)
    except ArchiveError as exc:
        return ArchivePreview(error=str(exc))
    return ArchivePreview(
        run_ids=summary.run_ids,
        statuses=summary.statuses,
        sweeps=summary.sweeps,
        engine_version=summary.engine_version,
        created_at=summary.created_at,
        includes_metrics=summary.includes_metrics,
        private_diagnostics=summary.private_diagnostics,
    )


def import_run_archive(data: bytes, *, serve_from_cache: bool = False) -> ImportReport:
    """Import every run of an archive in one transaction (ArchiveError, StoreError: the store is unchanged).
    `serve_from_cache`: the user's choice to let the archive's finished runs answer identical submissions here
    (cache hits, marked imported); by default they are kept as records only."""
    report = import_runs(get_store(), data, serve_from_cache=serve_from_cache)
    forget_run_names()  # the archive's runs come with their names
    return report

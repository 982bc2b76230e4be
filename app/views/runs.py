"""Runs: worker health, how many runs are in each status, the queue in the order workers take it (with
cancel buttons), every run filtered by status, one run opened with its status history, error and charts,
and moving finished runs between stores (export to a zip, import from one)."""

import time
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from app import services
from app.common import run_panel
from app.common.safe_text import literal, timestamp_text
from cache import RunRecord, RunStatus, StoreError
from cache.archive.format import ArchiveError

QUEUE_ROWS = 20  # queued runs listed with a cancel button; the rest are counted
TERMINAL = [RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED]


def _when(seconds: float | None) -> str:
    return timestamp_text(seconds) if seconds else ""


def _label(run: RunRecord) -> str:
    return f"{run.id} · {run.status.value} · {run.spec.get('dataset', '?')}/{run.spec.get('model', '?')}"


def _pick_runs(widget: Callable[..., Any], label: str, runs: list[RunRecord], *, key: str, help: str) -> Any:
    """`widget` (a selectbox or a multiselect) over the ids of `runs`, each shown by its label."""
    labels = {r.id: _label(r) for r in runs}
    return widget(label, list(labels), format_func=labels.get, key=key, help=help)


def workers() -> None:
    health = services.worker_health()
    if not health:
        st.warning("No worker is running: queued runs wait until one starts (`python -m engine worker`).")
    with st.expander(f"Workers ({sum(w['healthy'] for w in health)} healthy)", expanded=False):
        st.dataframe(pd.DataFrame(health), hide_index=True, width="stretch")


def status_counts(counts: dict[str, int]) -> None:
    for column, (status, count) in zip(st.columns(len(counts)), counts.items(), strict=True):
        column.metric(status, f"{count:,}", help=f"Runs in the store whose status is {status}.")


def _cancel(run_ids: list[str]) -> None:
    try:
        after = services.cancel_runs(run_ids)
    except StoreError as exc:
        st.session_state["runs_cancelled"] = f"Not cancelled: {literal(exc)}"
        return
    cancelled, stopping = after.count(RunStatus.CANCELLED), after.count(RunStatus.RUNNING)
    parts = []
    if cancelled:
        parts.append(f"Cancelled {cancelled} queued run(s).")
    if stopping:
        parts.append(f"Cancel requested for {stopping} running run(s): each stops at its next step.")
    if len(after) > cancelled + stopping:
        parts.append(f"{len(after) - cancelled - stopping} run(s) had already ended.")
    st.session_state["runs_cancelled"] = " ".join(parts)


def queue() -> None:
    """Running runs, then queued runs in the order workers claim them, each with a cancel button."""
    active = services.queue_order()
    st.subheader("Queue")
    if message := st.session_state.pop("runs_cancelled", None):
        st.success(message, icon=":material/cancel:")
    if not active:
        st.caption("Nothing is queued or running.")
        return
    st.caption("Workers take the oldest queued run first.")
    queued = [r for r in active if r.status is RunStatus.QUEUED]
    running = len(active) - len(queued)  # running runs come first
    for position, run in enumerate(active[:QUEUE_ROWS], start=1 - running):
        text, button = st.columns([6, 1], vertical_alignment="center")
        if run.status is RunStatus.RUNNING:
            where = f"running on {literal(run.worker or '?')} · step {run.progress_step}/{run.total_steps or '?'}"
        else:
            where = f"#{position} in the queue · submitted {_when(run.created_at)}"
        data = literal(f"{run.spec.get('dataset', '?')}/{run.spec.get('model', '?')}")
        text.markdown(f"`{run.id}` · {data} · {where}")
        button.button(
            "Cancel",
            key=f"runs_cancel::{run.id}",
            on_click=_cancel,
            args=([run.id],),
            disabled=run.cancel_requested,
            help="A queued run is cancelled at once; a running one stops at its next step.",
        )
    if len(active) > QUEUE_ROWS:
        st.caption(f"… and {len(active) - QUEUE_ROWS:,} more queued.")
    if len(queued) > 1:
        confirm = st.checkbox(
            f"Yes, cancel all {len(queued):,} queued runs",
            key="runs_confirm_cancel_all",
            help="Tick to enable the button that cancels every queued run at once.",
        )
        st.button(
            "Cancel all queued",
            key="runs_cancel_all",
            disabled=not confirm,
            on_click=_cancel,
            args=([r.id for r in queued],),
            help="Cancel every queued run; running runs go on.",
        )


def runs_table() -> list[RunRecord]:
    """Every run (newest first) in the statuses picked; returns the runs shown."""
    st.subheader("All runs")
    picked = st.multiselect(
        "Statuses",
        [s.value for s in RunStatus],
        default=[],
        key="runs_filter",
        placeholder="All statuses",
        help="Show only runs in these statuses; none picked shows every run.",
    )
    runs = services.runs_with_status([RunStatus(s) for s in picked] or list(RunStatus))
    if not runs:
        st.info("No runs yet: launch one from the Train page." if not picked else "No run has these statuses.")
        return []
    table = pd.DataFrame(
        [
            {
                "run": r.id,
                "status": r.status.value,
                "created": _when(r.created_at),
                "dataset": r.spec.get("dataset", "?"),
                "model": r.spec.get("model", "?"),
                "target ε": r.spec.get("target_epsilon"),
                "ε spent": (r.result or {}).get("epsilon"),
                "test accuracy": (r.result or {}).get("test_accuracy"),
                "steps": f"{r.progress_step}/{r.total_steps or '?'}",
                "imported": r.imported,
                "error": r.error
                or (f"no heartbeat for {age:.0f} s" if (age := services.heartbeat_age(r)) and age > 10 else ""),
            }
            for r in runs
        ]
    )
    st.dataframe(table, hide_index=True, width="stretch")
    return runs


def opened_run(runs: list[RunRecord]) -> None:
    """A run's charts and error (the run panel), then its status history."""
    chosen = _pick_runs(
        st.selectbox,
        "Open a run",
        runs,
        key="open_run",
        help="Show this run's progress, charts, error and status history.",
    )
    if not chosen:
        return
    st.divider()
    run_panel.run_panel(chosen)
    history = services.run_history(chosen)
    with st.expander(f"Status history ({len(history)} changes)", expanded=True):
        st.dataframe(
            pd.DataFrame(
                [
                    {"at": _when(e.at), "status": e.status.value, "worker": e.worker or "", "detail": e.detail or ""}
                    for e in history
                ]
            ),
            hide_index=True,
            width="stretch",
        )


PRIVATE_DIAGNOSTICS_WARNING = (
    "**Private diagnostics: not covered by ε.** The archive will also hold what was computed on the private "
    "training data and never released: each step's loss, accuracy and size of the lot, the share clipped, "
    "gradient-norm quantiles, realized regret, step timings, and the error text of failed runs on uploaded CSVs "
    "(which may quote a cell of the file). No ε bounds what they reveal about the people in "
    "the data. Keep the archive inside the lab; do not publish or share it as differentially private. Its "
    "manifest records that it holds them."
)
RELEASED_ONLY_NOTE = (
    "The archive holds released values only: specs, results, status history and, per step, ε by accountant, "
    "test-set accuracy and loss, and the epoch. Diagnostics computed on the private training data stay here."
)


def export_runs() -> None:
    finished = services.runs_with_status(TERMINAL, limit=1000)
    st.markdown("**Export**: finished, failed and cancelled runs, as a zip another store can import.")
    chosen = _pick_runs(
        st.multiselect,
        "Runs to export",
        finished,
        key="runs_export_ids",
        help="The runs to put in the archive (queued and running runs cannot travel).",
    )
    metrics = st.checkbox(
        "Include per-step metrics",
        value=True,
        key="runs_export_metrics",
        help="ε by step for each accountant, test-set accuracy and loss, epoch. Without them the archive holds "
        "specs, results and history only (much smaller).",
    )
    private = st.checkbox(
        "Include private diagnostics (not covered by ε)",
        value=False,
        key="runs_export_private",
        help="Values computed on the private training data that the dashboard shows but never releases (lot loss, "
        "accuracy and size, clip fraction, gradient-norm quantiles, regret, step timings). Off: they stay here.",
    )
    if private:
        st.warning(PRIVATE_DIAGNOSTICS_WARNING, icon=":material/warning:")
    else:
        st.caption(RELEASED_ONLY_NOTE)
    wanted = (tuple(chosen), metrics, private)
    if st.button(
        "Prepare archive",
        key="runs_export_prepare",
        disabled=not chosen,
        help="Build the zip of the selected runs; a download button appears when it is ready.",
    ):
        try:
            export = services.export_runs(list(chosen), include_metrics=metrics, include_private_diagnostics=private)
            st.session_state["runs_export"] = (wanted, export)
        except (ArchiveError, StoreError) as exc:
            st.error(f"**Nothing exported**: {literal(exc)}", icon=":material/error:")
    prepared = st.session_state.get("runs_export")
    if prepared and prepared[0] == wanted:
        export = prepared[1]
        what = "with private diagnostics" if export.private_diagnostics else "released values only"
        st.download_button(
            f"Download {len(export.run_ids)} run(s), {what} ({len(export.data) / 1e6:,.2f} MB)",
            data=export.data,
            file_name=f"dplab-runs-{time.strftime('%Y%m%d-%H%M%S')}.zip",
            mime="application/zip",
            key="runs_export_download",
            on_click="ignore",
            help="Save the archive; import it on the Runs page of another lab.",
        )


SERVE_HELP = (
    "The archive's results were computed elsewhere. Ticked, its finished runs of this engine version answer "
    "identical submissions here: they are shown as cache hits (marked imported) instead of training here. Only "
    "trust archives you made or whose source you trust. Unticked, they are kept as records only."
)


def import_report_text(report: dict) -> str:
    """What an import did, in one sentence: counts only (the report itself is shown as JSON below it)."""
    imported, hits = len(report["imported"]), len(report["cache_hits"])
    return (
        f"Imported {imported} run(s); skipped {len(report['skipped'])}. {hits} served from the cache for identical "
        f"runs here (marked imported); {imported - hits} kept as records only."
    )


def import_runs() -> None:
    st.markdown("**Import**: an archive exported by this lab. Runs already here are skipped, never overwritten.")
    if report := st.session_state.pop("runs_import_report", None):  # shown once, after the import's rerun
        st.success(import_report_text(report), icon=":material/download_done:")
        st.json(report, expanded=False)
    upload = st.file_uploader(
        "Run archive (.zip)",
        type=["zip"],
        key="runs_import_file",
        help="A zip made by Export here or by `python -m engine export`.",
    )
    if upload is None:
        return
    data = upload.getvalue()
    preview = services.preview_run_archive(data)
    if preview.error is not None:
        st.error(
            f"**This archive cannot be imported**: {literal(preview.error.rstrip('.'))}. The store is unchanged.",
            icon=":material/error:",
        )
        return
    by_status = pd.Series(preview.statuses, dtype=str).value_counts().to_dict()
    st.caption(
        f"{len(preview.run_ids)} run(s) ({', '.join(f'{n} {s}' for s, n in by_status.items())}), "
        f"{preview.sweeps} sweep(s), exported {_when(preview.created_at)} by engine "
        f"{literal(preview.engine_version)}, {'with' if preview.includes_metrics else 'without'} metrics."
    )
    if preview.private_diagnostics:
        st.warning(
            "**This archive holds private diagnostics**: values computed on its runs' training data that no ε "
            "covers (its exporter opted in, or exported before that was an opt-in). Keep it inside the lab.",
            icon=":material/warning:",
        )
    serve = st.checkbox(
        "Serve these results from the cache for identical runs here",
        value=False,
        key="runs_import_serve",
        help=SERVE_HELP,
    )
    if serve:
        st.warning(
            "**Results computed elsewhere**: identical submissions here will be answered by this archive's "
            "finished runs (marked imported) instead of training. Tick this only for an archive you made or "
            "whose source you trust.",
            icon=":material/warning:",
        )
    if st.button(
        f"Import {len(preview.run_ids)} run(s)",
        key="runs_import_confirm",
        help="Add the archive's runs to this store in one transaction: all of them or none.",
    ):
        try:
            report = services.import_run_archive(data, serve_from_cache=serve)
        except (ArchiveError, StoreError) as exc:
            st.error(f"**Nothing imported**: {literal(exc)}. The store is unchanged.", icon=":material/error:")
            return
        st.session_state["runs_import_report"] = report.to_dict()
        st.rerun()  # the counts and tables above include the imported runs


st.title("Runs")
workers()
status_counts(services.run_counts())
queue()
shown = runs_table()
if shown:
    opened_run(shown)
st.divider()
st.subheader("Export and import")
export_column, import_column = st.columns(2)
with export_column:
    export_runs()
with import_column:
    import_runs()

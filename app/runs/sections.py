"""The Runs page's sections: worker health, run counts, the queue with its cancel buttons, every run filtered by
status, and one run opened with its status history, error and charts."""

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from app import services
from app.common import run_panel
from app.common.labels import dataset_label, run_label
from app.common.safe_text import literal, timestamp_text
from cache import RunRecord, RunStatus, StoreError

QUEUE_ROWS = 20  # queued runs listed with a cancel button; the rest are counted
TERMINAL = [RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED]

LISTED = "runs_listed"  # the ids of the runs table's rows, in order, for a click on a row


def when(seconds: float | None) -> str:
    return timestamp_text(seconds) if seconds else ""


def pick_runs(widget: Callable[..., Any], label: str, runs: list[RunRecord], *, key: str, help: str) -> Any:
    """`widget` (a selectbox or a multiselect) over the ids of `runs`, each shown by its label."""
    labels = {r.id: run_label(r) for r in runs}
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
            where += " · cancelling…" if run.cancel_requested else ""
        else:
            where = f"#{position} in the queue · submitted {when(run.created_at)}"
        data = literal(f"{dataset_label(run.spec.get('dataset'))}/{run.spec.get('model', '?')}")
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


def run_list() -> list[RunRecord]:
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
                "created": when(r.created_at),
                "dataset": dataset_label(r.spec.get("dataset")),
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
    st.session_state[LISTED] = [r.id for r in runs]
    st.container(key="runs-list").dataframe(
        table,
        hide_index=True,
        width="stretch",
        key="runs_table",
        on_select=_open_selected,
        selection_mode="single-row",
    )
    st.caption("Click a row to open its run below; the address bar then names it, so the link opens it too.")
    return runs


def _open_selected() -> None:
    """The row clicked in the runs table opens its run (the selectbox below follows)."""
    rows = st.session_state["runs_table"]["selection"]["rows"]
    listed = st.session_state.get(LISTED, [])
    if rows and rows[0] < len(listed):
        st.session_state["open_run"] = listed[rows[0]]


def opened_run(runs: list[RunRecord]) -> None:
    """A run's charts and error (the run panel), then its status history. The open run is kept in the URL
    (`?run=`), and a link that names one opens it."""
    linked = st.query_params.get("run")
    if "open_run" not in st.session_state and linked in {r.id for r in runs}:
        st.session_state["open_run"] = linked
    chosen = pick_runs(
        st.selectbox,
        "Open a run",
        runs,
        key="open_run",
        help="Show this run's progress, charts, error and status history.",
    )
    if not chosen:
        return
    st.query_params["run"] = chosen
    st.divider()
    run_panel.run_panel(chosen)
    history = services.run_history(chosen)
    with st.expander(f"Status history ({len(history)} changes)", expanded=True):
        st.dataframe(
            pd.DataFrame(
                [
                    {"at": when(e.at), "status": e.status.value, "worker": e.worker or "", "detail": e.detail or ""}
                    for e in history
                ]
            ),
            hide_index=True,
            width="stretch",
        )

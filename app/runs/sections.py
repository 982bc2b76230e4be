"""The Runs page's sections: worker health, run counts, the queue with its cancel buttons, every run filtered by
status, and one run opened with its status history, error and charts."""

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from app import services
from app.common import run_panel
from app.common.labels import algorithm_name, dataset_label, run_label, run_name
from app.common.run_deletion import deletion_controls
from app.common.safe_text import literal, timestamp_text
from app.runs.filters import algorithm_of, filter_form, model_of, spent_epsilon
from cache import RunRecord, RunStatus, StoreError
from engine.privacy import epsilon_text

QUEUE_ROWS = 20  # queued runs listed with a cancel button; the rest are counted
FETCHED_RUNS = 1000  # the newest runs the search and filters look through
LISTED_ROWS = 200  # the matching runs the table lists
TABLE_COLUMNS = [
    "name",
    "status",
    "created",
    "dataset",
    "model",
    "algorithm",
    "target ε",
    "ε spent",
    "test accuracy",
    "steps",
    "imported",
    "error",
    "id",
]
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
        text.markdown(f"**{literal(run_name(run))}** · `{run.id}` · {where}")
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
    """Every run (newest first) that matches the search and filters; returns the runs shown."""
    st.subheader("All runs")
    runs = services.runs_with_status(list(RunStatus), limit=FETCHED_RUNS)
    if not runs:
        st.info("No runs yet: launch one from the Train page.")
        return []
    chosen = filter_form(runs)
    names = {r.id: run_name(r) for r in runs}
    matching = [r for r in runs if chosen.keeps(r, names[r.id])]
    if not matching:
        st.info("No run matches the search and filters.")
        return []
    shown = matching[:LISTED_ROWS]
    st.session_state[LISTED] = [r.id for r in shown]
    st.container(key="runs-list").dataframe(
        runs_table(shown, names),
        hide_index=True,
        width="stretch",
        key="runs_table",
        on_select=_open_selected,
        selection_mode="single-row",
    )
    newest = f"the newest {len(shown):,} of " if len(shown) < len(matching) else ""
    looked = f"the {len(runs):,} newest runs" if len(runs) == FETCHED_RUNS else f"{len(runs):,} runs"
    st.caption(
        f"Showing {newest}{len(matching):,} of {looked}. Click a row to open its run below; the address bar then "
        "names it, so the link opens it too."
    )
    return shown


def runs_table(runs: list[RunRecord], names: dict[str, str]) -> pd.DataFrame:
    """One row per run, its name first and its id last; a value a run does not have is a blank cell (text, so
    that no cell reads "None" or "nan"), a non-private run's ε spent is ∞. The "imported" column only when a run
    listed was imported."""
    columns = [c for c in TABLE_COLUMNS if c != "imported" or any(r.imported for r in runs)]
    return pd.DataFrame(
        [
            {
                "name": names[r.id],
                "status": r.status.value,
                "created": when(r.created_at),
                "dataset": dataset_label(r.spec.get("dataset")),
                "model": model_of(r),
                "algorithm": algorithm_name(algorithm_of(r)),
                "target ε": _number_text(r.spec.get("target_epsilon"), ".4g"),
                "ε spent": "" if (spent := spent_epsilon(r)) is None else epsilon_text(spent, ".4g"),
                "test accuracy": _number_text((r.result or {}).get("test_accuracy"), ".3f"),
                "steps": f"{r.progress_step}/{r.total_steps}" if r.total_steps else "",
                "imported": r.imported,
                "error": r.error
                or (f"no heartbeat for {age:.0f} s" if (age := services.heartbeat_age(r)) and age > 10 else ""),
                "id": r.id,
            }
            for r in runs
        ],
        columns=columns,
    )


def _number_text(value: Any, spec: str) -> str:
    """A finite number formatted; a blank for anything else (none, text, NaN)."""
    usable = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return format(value, spec) if usable else ""


def delete_section(runs: list[RunRecord]) -> None:
    """Delete runs listed above, after ticking a confirmation; the store's own rule says which cannot go (queued
    and running runs)."""
    if notice := st.session_state.pop("runs_delete_notice", None):
        kind, text = notice
        (st.success if kind == "success" else st.error)(text, icon=":material/delete:")
    listed = {r.id for r in runs}
    kept = [i for i in st.session_state.get("runs_delete_ids", []) if i in listed]
    st.session_state["runs_delete_ids"] = kept  # a run no longer listed is no longer picked
    with st.expander("Delete runs", expanded=bool(kept)):
        chosen = pick_runs(
            st.multiselect,
            "Runs to delete",
            runs,
            key="runs_delete_ids",
            help="Pick runs listed above to delete them with their metrics and status history. Queued and running "
            "runs cannot be deleted: cancel them first.",
        )
        if not chosen:
            return
        deletion_controls(
            list(chosen),
            page="runs",
            names={run.id: run_name(run) for run in runs},
            notice_key="runs_delete_notice",
            export_hint="export the runs below first if you may need them.",
            after=_forget_deleted,
        )


def _forget_deleted(run_ids: list[str]) -> None:
    st.session_state["runs_delete_ids"] = []
    if st.session_state.get("open_run") in run_ids:
        del st.session_state["open_run"]


def _open_selected() -> None:
    """The row clicked in the runs table opens its run (the selectbox below follows)."""
    rows = st.session_state["runs_table"]["selection"]["rows"]
    listed = st.session_state.get(LISTED, [])
    if rows and rows[0] < len(listed):
        st.session_state["open_run"] = listed[rows[0]]


def opened_run(runs: list[RunRecord]) -> None:
    """A run's charts and error (the run panel), then its status history. The open run is kept in the URL
    (`?run=`), and a link that names one opens it."""
    listed = {r.id for r in runs}
    if st.session_state.get("open_run") not in (None, *listed):
        del st.session_state["open_run"]  # filtered out or deleted: the first run listed opens
    linked = st.query_params.get("run")
    if "open_run" not in st.session_state and linked in listed:
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

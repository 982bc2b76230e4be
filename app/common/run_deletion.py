"""Deleting runs from a page (Compare, Runs): the store's reason when the selection cannot go, a confirmation
checkbox, then the button; one rule for every page that deletes."""

from collections.abc import Callable, Mapping

import streamlit as st

from app import services
from app.common.safe_text import literal
from cache import StoreError


def deletion_controls(
    run_ids: list[str],
    *,
    page: str,
    names: Mapping[str, str],
    notice_key: str,
    export_hint: str,
    after: Callable[[list[str]], None],
) -> None:
    """The confirmation and the button for deleting `run_ids` (widget keys `<page>_confirm_delete` and
    `<page>_delete`); after a deletion `after(run_ids)` clears the page's own state and `notice_key` holds what
    to tell the user, runs named by `names`."""
    problem = services.why_not_deletable(run_ids)
    if problem:
        st.error(f"Cannot delete the selection: {literal(problem)}")
    confirmed = st.checkbox(
        f"Yes, permanently delete the {len(run_ids)} selected run(s) with their metrics",
        key=f"{page}_confirm_delete",
        disabled=problem is not None,
        help=f"Deleting cannot be undone: {export_hint}",
    )
    st.button(
        "Delete selected runs",
        key=f"{page}_delete",
        disabled=problem is not None or not confirmed,
        on_click=_delete,
        args=(run_ids, page, dict(names), notice_key, after),
        icon=":material/delete:",
        help="Delete the selected runs from the store (tick the confirmation first).",
    )


def _delete(run_ids, page, names, notice_key, after) -> None:
    try:
        count = services.delete_stored_runs(run_ids)
    except StoreError as exc:
        st.session_state[notice_key] = ("error", f"Nothing was deleted: {literal(exc)}")
        return
    st.session_state[f"{page}_confirm_delete"] = False
    after(run_ids)
    deleted = ", ".join(f"{literal(names.get(i, i))} (`{i}`)" for i in run_ids)
    st.session_state[notice_key] = ("success", f"Deleted {count} run(s): {deleted}.")

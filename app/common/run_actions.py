"""What a user does with a run on screen, below its panel: name it, or sweep around its configuration."""

import streamlit as st

from app import services
from app.common import handoff
from app.common.safe_text import literal
from cache import RunRecord, StoreError
from cache.store.names import MAX_NAME_CHARS


def actions(run: RunRecord) -> None:
    """The run's name (editable: its label on every page) and "Sweep around this run"."""
    st.text_input(
        "Name this run",
        value=services.run_names().get(run.id, ""),
        max_chars=MAX_NAME_CHARS,
        key=f"name-{run.id}",
        on_change=_rename,
        args=(run.id,),
        placeholder="e.g. baseline, ε 3",
        help="Your own label for this run on every page and chart (the Compare legend, the run lists); it changes "
        "nothing the run computed and travels with the run when you export it.",
    )
    if st.button(
        "Sweep around this run",
        key=f"sweep-around-{run.id}",
        icon=":material/grid_view:",
        help="Open the Sweep page with this run's configuration as the base of a grid.",
    ):
        handoff.send(handoff.SWEEP, run.spec, f"run {run.id}")


def _rename(run_id: str) -> None:
    try:
        services.set_run_name(run_id, st.session_state[f"name-{run_id}"])
    except StoreError as exc:
        st.toast(f"Not renamed: {literal(exc)}")

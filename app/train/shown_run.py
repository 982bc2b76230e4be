"""Which run the Train page shows under its form, kept in the URL (`?run=`) and across page switches, and a note
when the form describes another configuration than that run's."""

import json

import streamlit as st

from app import services
from app.common.safe_text import literal
from app.train.session_fields import restore

SHOWN = "train_shown_run"  # the run on screen, for when the user comes back from another page


def shown_run_id() -> str | None:
    """The run the URL names, else the one this session last showed, else the newest active run."""
    run_id = st.query_params.get("run") or st.session_state.get(SHOWN)
    if run_id is None and (active := services.latest_active_run()) is not None:
        run_id = active.id
    if run_id:
        remember(run_id)
    return run_id


def remember(run_id: str) -> None:
    st.session_state[SHOWN] = run_id
    st.query_params["run"] = run_id


def configuration_note(run_id: str, preview: services.PlanPreview) -> None:
    """Say so when pressing Train would launch something else than the run on screen, and offer its values."""
    run = services.get_run(run_id)
    if run is None or not preview.canonical:
        return
    if services.canonical_spec(json.dumps(run.spec, sort_keys=True)) == preview.canonical:
        return
    text, button = st.columns([4, 1], vertical_alignment="center")
    text.info(
        f"The form describes another configuration than run {literal(run_id)}'s: **Train** launches the form's.",
        icon=":material/info:",
    )
    button.button(
        "Load this run's values",
        key="train_load_run",
        on_click=restore,
        args=(run.spec, f"run {run_id}"),
        help="Fill the form with the configuration this run trained with (where the form can show it).",
    )

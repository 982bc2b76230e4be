"""Sweep: pick one or two parameters and their values (and seeds), launch the grid, and watch the
privacy–utility frontier (accuracy against ε, spread over seeds) grow as its runs finish."""

import streamlit as st

from app import services
from app.common.safe_text import literal
from app.sweep import base_spec, form, panel, release
from app.sweep.frontier import SPREADS

st.title("Sweep")
st.caption(
    "Train a grid of configurations that differ in one or two parameters, each with several seeds, and see "
    "the privacy–utility frontier they trace. Points already trained come from the result cache."
)

base = base_spec.base_form()
st.subheader("Design a sweep")
st.caption(form.base_caption(base))
choice = form.grid_inputs(base)
preview = services.preview_sweep(choice.spec) if choice.spec is not None else None
problem = choice.error or (preview.error if preview else None)
if problem:
    st.error(f"Cannot launch this sweep: {literal(problem)}")
elif preview is not None:
    st.info(form.preview_text(choice, preview))
release_slot = st.empty()  # filled last: its first computation takes seconds and must not hold up the page

form.launch(choice, problem)

st.divider()
st.subheader("Results")
sweeps = {sweep.id: sweep for sweep in services.list_sweeps()}
if not sweeps:
    st.info("No sweep yet: design one above and press **Launch sweep**; its frontier appears here as runs finish.")
    release.planned_cost(choice.spec, release_slot, problem)
    st.stop()
if st.session_state.get("sweep_shown") not in sweeps:
    st.session_state.pop("sweep_shown", None)  # deleted since: show the newest
left, right = st.columns([3, 2])
shown = left.selectbox(
    "Sweep",
    list(sweeps),
    format_func=lambda sweep_id: panel.sweep_label(sweeps[sweep_id]),
    key="sweep_shown",
    help="Any sweep in the store, newest first (also those launched from the command line).",
)
spread = base_spec.titled_choice(
    right.radio,
    "Spread over seeds",
    SPREADS,
    key="sweep_spread",
    horizontal=True,
    help="What the error bars of each grid point show: the lowest to highest accuracy, or one standard deviation.",
)
panel.show(shown, spread=spread)
release.planned_cost(choice.spec, release_slot, problem)

"""Train: pick a configuration (or a preset), see what it implies for privacy, launch it, and watch it train."""

import json

import streamlit as st

from app import services
from app.common import run_panel
from app.common.safe_text import literal
from app.train import duration, plan_summary, shown_run, train_form, widget_spec
from app.train.session_fields import LINK, link_spec
from engine.training import SpecError

raw_spec = train_form.spec_form()
st.query_params[LINK] = link_spec(raw_spec)  # a reload or a shared link opens this configuration
st.title("Train a differentially private model" if raw_spec.get("delta") else "Train a non-private baseline")
st.caption(widget_spec.algorithm_caption(raw_spec["algorithm"]))
plan_summary.dataset_note(raw_spec["dataset"])
preview = services.preview_plan(json.dumps(raw_spec, sort_keys=True))
plan_summary.plan_summary(preview, target_epsilon=raw_spec.get("target_epsilon"))
duration.expected_duration(raw_spec, preview)

TRAIN_HELP = "Queue this configuration for a background worker (an identical finished run is served from the cache)."
if st.button(
    "Train",
    type="primary",
    key="train",
    disabled=preview.error is not None,
    help=TRAIN_HELP if preview.error is None else f"Cannot train this configuration: {literal(preview.error)}",
):
    try:
        submission = services.submit_spec(raw_spec)
    except SpecError as exc:
        st.error(f"Cannot train this configuration: {literal(exc)}")
    else:
        shown_run.remember(submission.run_id)
        st.session_state["from_cache"] = submission.run_id if submission.cached else None
        if not submission.cached:
            services.await_first_step(submission.run_id)  # this redraw plots it: no wait for the next poll

if run_id := shown_run.shown_run_id():
    st.divider()
    shown_run.configuration_note(run_id, preview)
    run_panel.run_panel(run_id, from_cache=st.session_state.get("from_cache") == run_id)
else:
    st.info("Press **Train** to start a run; it trains in a background worker and plots here live.")

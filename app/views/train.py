"""Train: pick a configuration, see what it implies for privacy, launch it, and watch it train."""

import json

import streamlit as st

from app import run_panel, services, spec_form
from engine.training import SpecError

st.title("Train a differentially private model")
st.caption(
    "DP-SGD with Poisson-sampled lots, per-example clipping and Gaussian noise. ε is tracked live by the RDP "
    "(moments) accountant; the finished run reports the tightest of RDP, PLD and the composition theorems."
)

raw_spec = spec_form.spec_form()
preview = services.preview_plan(json.dumps(raw_spec, sort_keys=True))
spec_form.plan_summary(preview)

if st.button("Train", type="primary", key="train", disabled=preview.error is not None):
    try:
        submission = services.submit_spec(raw_spec)
    except SpecError as exc:
        st.error(str(exc))
    else:
        st.query_params["run"] = submission.run_id
        st.session_state["from_cache"] = submission.run_id if submission.cached else None

run_id = st.query_params.get("run")
if run_id is None and (active := services.latest_active_run()) is not None:
    run_id = active.id
if run_id:
    st.divider()
    run_panel.run_panel(run_id, from_cache=st.session_state.get("from_cache") == run_id)
else:
    st.info("Press **Train** to start a run; it trains in a background worker and plots here live.")

"""Plan: what a DP-SGD schedule costs in privacy, before anything trains. Pick the data size, lots, epochs and δ,
then a target ε (σ is calibrated) or σ (ε follows); see σ, T, q, ε against epochs by every accountant, the
warnings and the privacy statement a run would carry. Nothing on this page trains."""

import streamlit as st

from app import services
from app.plan import sections

st.title("Plan a private training run")
st.caption(
    "No training here, and nothing starts when you move a slider: the numbers follow your inputs. σ is calibrated "
    "by the RDP accountant, as on the Train page; ε is shown by every accountant that applies, each a valid upper "
    "bound."
)

settings = sections.plan_form()
plan = services.privacy_plan(settings)  # σ by RDP, T, q, ε by RDP: instant
if plan.error:
    st.error(f"Cannot plan this configuration: {plan.error}", icon=":material/error:")
    st.stop()

tightest_slot = sections.headline(plan)
sections.train_this_plan(settings)
warnings_box = st.container()
if plan.calibrated and st.toggle(
    "Also calibrate σ by PLD",
    key="plan_pld_sigma",
    persist_state=sections.KEEP,
    help="The PLD accountant is tighter than RDP, so it finds a smaller σ (less noise, better accuracy) for the "
    "same ε; it takes a few seconds.",
):
    sections.pld_sigma(plan, services.plan_pld_sigma(plan))

accounts = services.plan_panel(plan)  # PLD and the composition bounds: seconds the first time, then cached
sections.tightest_epsilon(tightest_slot, *accounts.tightest())
sections.warnings(warnings_box, services.plan_warnings(plan, accounts))
sections.accountant_curves(plan, accounts)
sections.privacy_statement(services.plan_statement(plan, accounts))

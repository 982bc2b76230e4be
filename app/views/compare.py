"""Compare: filter the stored runs by dataset, model and algorithm, select several, and see them side by
side: overlaid curves, their frontier, and a table of every hyperparameter and result (CSV and PNG
downloads). Selected runs can be deleted, behind a confirmation."""

import streamlit as st

from app import services
from app.compare import sections

st.title("Compare runs")
sections.notice()

runs = services.recent_runs(limit=sections.MAX_LISTED)
if not runs:
    st.info("No runs yet: train one on the **Train** page or launch a grid on the **Sweep** page, then compare here.")
    st.stop()

selected = sections.select_runs(runs)
if not selected:
    st.info("Choose two or more runs above to overlay their curves and compare their results.")
    st.stop()

st.subheader("Curves")
sections.curves(selected)
st.subheader("Privacy–utility frontier")
sections.frontier(selected)
st.subheader("Releasing them together")
sections.release_together(selected)
st.subheader("Every hyperparameter and result")
sections.table(selected)
st.subheader("Delete")
sections.delete(selected)

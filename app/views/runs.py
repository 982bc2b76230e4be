"""Runs: worker health, how many runs are in each status, the queue in the order workers take it (with
cancel buttons), every run filtered by status, one run opened with its status history, error and charts,
and moving finished runs between stores (export to a zip, import from one)."""

import streamlit as st

from app import services
from app.runs.sections import opened_run, queue, run_list, status_counts, workers
from app.runs.transfer import export_form, import_form

st.title("Runs")
workers()
status_counts(services.run_counts())
queue()
shown = run_list()
if shown:
    opened_run(shown)
st.divider()
st.subheader("Export and import")
export_column, import_column = st.columns(2)
with export_column:
    export_form()
with import_column:
    import_form()

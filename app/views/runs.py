"""Runs: worker health, how many runs are in each status, the queue in the order workers take it (with
cancel buttons), every run found by its name or id and filtered by status, dataset, model, algorithm, ε spent
and creation day (with a confirmed delete), one run opened with its status history, error and charts,
and moving finished runs between stores (export to a zip, import from one)."""

import streamlit as st

from app import services
from app.runs.sections import delete_section, opened_run, queue, run_list, status_counts, workers
from app.runs.transfer import export_form, import_form

st.title("Runs")
workers()
status_counts(services.run_counts())
queue()
shown = run_list()
if shown:
    delete_section(shown)
    opened_run(shown)
st.divider()
st.subheader("Export and import")
export_column, import_column = st.columns(2)
with export_column:
    export_form()
with import_column:
    import_form()

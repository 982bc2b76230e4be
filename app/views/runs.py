"""Runs: every run in the store, newest first; open one to see its charts again."""

import time

import pandas as pd
import streamlit as st

from app import run_panel, services

st.title("Runs")
runs = services.recent_runs()
if not runs:
    st.info("No runs yet: launch one from the Train page.")
    st.stop()

table = pd.DataFrame(
    [
        {
            "run": r.id,
            "status": r.status.value,
            "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at)),
            "dataset": r.spec["dataset"],
            "model": r.spec["model"],
            "target ε": r.spec.get("target_epsilon"),
            "ε spent": (r.result or {}).get("epsilon"),
            "test accuracy": (r.result or {}).get("test_accuracy"),
            "steps": f"{r.progress_step}/{r.total_steps or '?'}",
            "error": r.error or "",
        }
        for r in runs
    ]
)
st.dataframe(table, hide_index=True, width="stretch")

labels = {r.id: f"{r.id} · {r.status.value} · {r.spec['dataset']}/{r.spec['model']}" for r in runs}
chosen = st.selectbox("Open a run", list(labels), format_func=labels.get, key="open_run")
if chosen:
    st.divider()
    run_panel.run_panel(chosen)

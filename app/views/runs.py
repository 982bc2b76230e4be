"""Runs: every run in the store, newest first; open one to see its charts again."""

import time

import pandas as pd
import streamlit as st

from app import run_panel, services

st.title("Runs")
workers = services.worker_health()
if not workers:
    st.warning("No worker is running: queued runs wait until one starts (`python -m engine worker`).")
with st.expander(f"Workers ({sum(w['healthy'] for w in workers)} healthy)", expanded=False):
    st.dataframe(pd.DataFrame(workers), hide_index=True, width="stretch")

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
            "dataset": r.spec.get("dataset", "?"),
            "model": r.spec.get("model", "?"),
            "target ε": r.spec.get("target_epsilon"),
            "ε spent": (r.result or {}).get("epsilon"),
            "test accuracy": (r.result or {}).get("test_accuracy"),
            "steps": f"{r.progress_step}/{r.total_steps or '?'}",
            "error": r.error
            or (f"no heartbeat for {age:.0f} s" if (age := services.heartbeat_age(r)) and age > 10 else ""),
        }
        for r in runs
    ]
)
st.dataframe(table, hide_index=True, width="stretch")

labels = {r.id: f"{r.id} · {r.status.value} · {r.spec.get('dataset', '?')}/{r.spec.get('model', '?')}" for r in runs}
chosen = st.selectbox("Open a run", list(labels), format_func=labels.get, key="open_run")
if chosen:
    st.divider()
    run_panel.run_panel(chosen)

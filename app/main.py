"""Entry file: sets up the page and routes to the pages in app/views/."""

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/main.py` puts only app/ on the path
    sys.path.insert(0, str(ROOT))

# An emoji favicon is drawn locally; a :material/…: one is fetched from fonts.gstatic.com on every page load.
st.set_page_config(page_title="DP lab", page_icon="🔒", layout="wide")

# Metric labels wrap instead of being cut ("Noise mult…") where a column is narrow (an 800 px window).
st.html(
    "<style>[data-testid='stMetricLabel'], [data-testid='stMetricLabel'] * "
    "{white-space: normal !important; overflow: visible !important; text-overflow: clip !important;}</style>"
)

pages = [
    st.Page("views/plan.py", title="Plan", icon=":material/calculate:"),
    st.Page("views/train.py", title="Train", icon=":material/model_training:", default=True),
    st.Page("views/sweep.py", title="Sweep", icon=":material/grid_view:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/runs.py", title="Runs", icon=":material/list:"),
    st.Page("views/data.py", title="Data", icon=":material/database:"),
]
st.navigation(pages).run()

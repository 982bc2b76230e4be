"""Entry file: sets up the page and routes to the pages in app/views/."""

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/main.py` puts only app/ on the path
    sys.path.insert(0, str(ROOT))

st.set_page_config(page_title="DP lab", page_icon=":material/lock:", layout="wide")

pages = [
    st.Page("views/train.py", title="Train", icon=":material/model_training:", default=True),
    st.Page("views/runs.py", title="Runs", icon=":material/list:"),
]
st.navigation(pages).run()

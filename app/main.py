"""Entry file: sets up the page and routes to the pages `app/pages.py` lists (their scripts in app/views/)."""

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/main.py` puts only app/ on the path
    sys.path.insert(0, str(ROOT))

from app.pages import PAGES  # noqa: E402
from cache import StoreUnusable  # noqa: E402

# An emoji favicon is drawn locally; a :material/…: one is fetched from fonts.gstatic.com on every page load.
st.set_page_config(page_title="DP lab", page_icon="🔒", layout="wide")

# A narrow window (800 px with the sidebar open): metric labels and notes wrap instead of being cut ("Noise mult…"), and
# columns too narrow for what they hold go to the next line instead of cutting it: a metric below ~8 rem, a chart
# or a table below ~26 rem (Streamlit stacks columns only under 640 px).
st.html(
    "<style>[data-testid='stMetricLabel'], [data-testid='stMetricLabel'] *, [data-testid='stMetricDelta'] * "
    "{white-space: normal !important; overflow: visible !important; text-overflow: clip !important;}"
    "[data-testid='stMain'] [data-testid='stHorizontalBlock'] {flex-wrap: wrap;}"
    "[data-testid='stMain'] [data-testid='stColumn'] {min-width: min(100%, 8rem);}"
    "[data-testid='stMain'] [data-testid='stColumn']:has([data-testid='stPlotlyChart'], [data-testid='stDataFrame'], "
    "[data-testid='stTable']) {min-width: min(100%, 26rem);}</style>"
)

pages = [st.Page(page.script, title=page.title, icon=page.icon, default=page.default) for page in PAGES]
try:
    st.navigation(pages).run()
except StoreUnusable as exc:  # damaged, not a store, read-only, full disk, newer schema: what to do, no traceback
    st.error(f"The store cannot be used: {exc}", icon=":material/database:")

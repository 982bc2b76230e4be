"""Data: the datasets the engine knows (sizes, and whether their files are here), and your own CSV upload."""

import streamlit as st

from app import services
from app.data import form

st.title("Data")
st.caption(
    "Every dataset is public knowledge except its rows: sizes, feature counts and classes are treated as "
    "public, and every preprocessing step uses fixed public constants, never statistics of the private data."
)

st.subheader("Datasets")
st.dataframe(
    services.dataset_catalog(),
    hide_index=True,
    width="stretch",
    column_config={
        "dataset": st.column_config.TextColumn(help="What a run spec names as its dataset."),
        "available": st.column_config.TextColumn(help="Built in, found in a data directory, or fetched on first use."),
        "on disk": st.column_config.TextColumn(help="Size of the files found here (– where none are)."),
    },
)
sizes = services.storage_bytes()
store, downloads, uploads = st.columns(3)
store.metric("Run store", services.size_text(sizes["store"]), help="The SQLite store of runs, metrics and history.")
downloads.metric(
    "Downloaded datasets",
    services.size_text(sizes["datasets"]),
    help="The data home's datasets/ folder; DPLAB_DATA_DIR copies are not counted.",
)
uploads.metric("Your uploads", services.size_text(sizes["uploads"]), help="Saved CSV uploads and their schemas.")
form.saved_uploads()

st.subheader("Upload a CSV")
st.markdown(
    "Upload a UTF-8 CSV with a header row, pick the **target** column, and declare each other column as "
    "**numeric** (with bounds), **categorical** (with its categories) or **ignored**. The whole file is checked "
    "before it is saved; a malformed file (empty, not UTF-8, rows with a different number of fields, a "
    "repeated column name, over the size limit) is refused with the line at fault, and nothing is kept."
)
form.upload_form()

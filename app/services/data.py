"""The Data page's services: datasets and CSV uploads."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.services import catalog, uploads
from app.services.store import get_store
from cache import data_home, datasets_dir
from cache.store.maintenance import folder_bytes, store_bytes
from engine.jobs.settings import default_data_dirs
from engine.training import DATASETS, DatasetError, dataset_info
from engine.training.datasets import CSV_PREFIX, DatasetInfo


def dataset_catalog() -> pd.DataFrame:
    """Every registered dataset, then every saved upload: sizes, and whether its files are here."""
    rows = catalog.catalog_rows(default_data_dirs(), uploads.list_uploads(data_home()))
    return pd.DataFrame(rows)


def storage_bytes() -> dict[str, int]:
    """Bytes on disk of the run store, the downloaded datasets folder and the saved uploads."""
    return {
        "store": store_bytes(get_store()),
        "datasets": folder_bytes(datasets_dir()),
        "uploads": folder_bytes(uploads.uploads_dir(data_home())),
    }


@dataclass(frozen=True)
class TrainingDataset:
    """A dataset the Train form offers: a registered one, or a CSV upload with its declared schema."""

    label: str
    info: DatasetInfo
    schema: dict | None = None


@st.cache_resource(show_spinner=False, max_entries=64)  # a resource: the facts hold their loader (not picklable)
def _upload_info(dataset: str, schema_json: str, modified: float) -> DatasetInfo:
    return dataset_info(dataset, json.loads(schema_json))  # reads the header and counts rows: cached per file version


def training_datasets() -> dict[str, TrainingDataset]:
    """Registered datasets, then saved CSV uploads (newest first) whose file still reads with its schema."""
    found = {name: TrainingDataset(label=info.title, info=info) for name, info in DATASETS.items()}
    for label, dataset, schema in uploaded_datasets():
        try:
            modified = Path(dataset.removeprefix("csv:")).stat().st_mtime
            info = _upload_info(dataset, json.dumps(schema, sort_keys=True), modified)
        except (OSError, DatasetError, ValueError):
            continue  # a file removed or changed since it was saved: the Data page says so
        found[dataset] = TrainingDataset(label=label, info=info, schema=schema)
    return found


@st.cache_data(ttl=5, show_spinner=False)
def dataset_names() -> dict[str, str]:
    """What each dataset a spec can name is called on screen: a registered one by its name, a CSV upload by the
    label the user gave it (its path and hash never: they say nothing to a reader)."""
    return {dataset: label for label, dataset, _ in uploaded_datasets()}


def dataset_name(dataset: str) -> str:
    """A spec's dataset as the user knows it: "digits", "adult", or an upload's own label."""
    if not dataset.startswith(CSV_PREFIX):
        return dataset
    return dataset_names().get(dataset) or "an uploaded CSV no longer saved"


UPLOAD_LINK_PREFIX = "upload:"  # a link names a saved upload by its label: "upload:People (synthetic)"


def dataset_link_name(dataset: Any) -> Any:
    """A spec's dataset as a shareable link writes it: a registered dataset by its name, a saved upload by its
    label (its path on this machine and its SHA-256 never leave the store)."""
    if not isinstance(dataset, str) or not dataset.startswith(CSV_PREFIX):
        return dataset
    return UPLOAD_LINK_PREFIX + (dataset_names().get(dataset) or "no longer saved")


def dataset_from_link(name: Any) -> Any:
    """The dataset a link's name stands for (`dataset_link_name`'s inverse); an upload this machine does not hold
    stays as the link wrote it (the form then says it cannot use it)."""
    if not isinstance(name, str) or not name.startswith(UPLOAD_LINK_PREFIX):
        return name
    label = name.removeprefix(UPLOAD_LINK_PREFIX)
    return next((dataset for shown, dataset, _ in uploaded_datasets() if shown == label), name)


def saved_uploads() -> list[uploads.SavedUpload]:
    """The CSV uploads saved in the data home, newest first."""
    return uploads.list_uploads(data_home())


def delete_saved_upload(upload: uploads.SavedUpload) -> None:
    """Delete a saved upload (its runs keep their records) and forget what the page cached about it."""
    uploads.delete_upload(upload)
    dataset_names.clear()


def uploaded_datasets() -> list[tuple[str, str, dict]]:
    """Saved CSV uploads, newest first, as (label, dataset string "csv:PATH", schema): a spec trains on
    one with {"dataset": dataset string, "schema": schema, ...}."""
    return uploads.labelled(uploads.list_uploads(data_home()))


@st.cache_data(show_spinner="Reading the file…", max_entries=4)
def inspect_csv_upload(file_name: str, data: bytes) -> uploads.Inspection:
    """The upload's header, first rows and row count, or the error that makes it unusable."""
    return uploads.inspect_upload(file_name, data)


@st.cache_data(show_spinner="Suggesting a schema…", max_entries=16)
def suggest_csv_schema(file_name: str, data: bytes, target: str) -> uploads.Suggestion:
    """The engine's suggested schema with `target` as the label, or why that column cannot be one."""
    return uploads.suggest_schema(file_name, data, target)


def save_csv_upload(file_name: str, data: bytes, raw_schema: dict, label: str) -> uploads.SavedUpload:
    """Check every cell against the schema, then keep the file and its schema under the data home.
    Raises UploadError or CsvSchemaError (a ValueError naming the field), and then nothing was saved."""
    return uploads.save_upload(data_home(), file_name=file_name, data=data, raw_schema=raw_schema, label=label)

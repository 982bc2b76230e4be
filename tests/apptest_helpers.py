"""Streamlit AppTest helpers the page tests share: opening the app on a page, uploading a file, and reading its
metrics, errors, tables, widgets and charts back; the tiny trained sweep of the Sweep and Compare pages' tests
(the `trained_sweep` and `trained_store` fixtures in conftest.py)."""

import base64
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from app.common.safe_text import unescape
from cache import Store
from engine.jobs.sweep import submit_sweep
from engine.jobs.workers.worker import Worker
from tests.helpers import ROOT, fast_spec

MAIN = str(ROOT / "app" / "main.py")


def open_page(page: str) -> AppTest:
    """The app switched to `views/<page>.py`, which must have run without an exception."""
    at = open_page_unchecked(page)
    assert not at.exception, at.exception
    return at


def open_app() -> AppTest:
    """The app run once on its default page (Train), without an exception."""
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def train_form_spec(at: AppTest) -> dict:
    """The raw spec the Train form describes, from its widget values."""
    from app.train.presets import FORM_DEFAULTS
    from app.train.widget_spec import raw_spec

    return raw_spec({name: at.session_state[f"train_{name}"] for name in FORM_DEFAULTS})


def open_page_unchecked(page: str) -> AppTest:
    """The app switched to `views/<page>.py`, whatever happened there (the test looks at it itself)."""
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page(f"views/{page}.py").run()
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def errors(at: AppTest) -> list[str]:
    """The errors as they read: untrusted text in them is backslash-escaped Markdown (`safe_text.literal`)."""
    return [unescape(e.value) for e in at.error]


def error_text(at: AppTest) -> str:
    """The errors' raw Markdown, joined by spaces; the script must have run without an exception."""
    assert not at.exception, at.exception
    return " ".join(e.value for e in at.error)


def chart_specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def chart_titles(at: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in chart_specs(at)]


def table_with(at: AppTest, column: str):
    return next(d.value for d in at.dataframe if column in d.value)


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="data_upload").set_value((name, data, "text/csv")).run()
    assert not at.exception, at.exception
    return at


WIDGETS = (
    "button",
    "checkbox",
    "download_button",
    "multiselect",
    "number_input",
    "radio",
    "select_slider",
    "selectbox",
    "slider",
    "text_input",
    "toggle",
)
TINY_BASE = {k: v for k, v in fast_spec(epochs=1, lot_size=128).items() if k != "target_epsilon"}
# Two tiny digits runs: σ = 1 and 2, one epoch at lot size 128, seed 0.
TINY_SWEEP = {"name": "two σ", "base": TINY_BASE, "grid": {"noise_multiplier": [1.0, 2.0]}, "seeds": [0]}


def train_tiny_sweep(store: Store) -> str:
    """The two tiny runs of TINY_SWEEP, trained here; returns the sweep's id."""
    sweep = submit_sweep(store, TINY_SWEEP)
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    return sweep.sweep_id


def copy_store(source: Path, home: Path) -> Store:
    """A copy of the store at `source` as the data home's store (SQLite's online backup: WAL included)."""
    home.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(home / "runs.sqlite3")) as dst:
        src.backup(dst)
    return Store(home / "runs.sqlite3")


def widgets(at: AppTest) -> list:
    return [w for kind in WIDGETS for w in at.get(kind)]


def decoded(value):
    """Plotly's JSON with its typed arrays ({"dtype", "bdata"}: base64) turned back into lists."""
    if isinstance(value, dict) and "bdata" in value and "dtype" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    if isinstance(value, dict):
        return {k: decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decoded(v) for v in value]
    return value


def figures(at: AppTest) -> list[dict]:
    return [decoded(json.loads(chart.proto.spec)) for chart in at.get("plotly_chart")]

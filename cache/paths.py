"""Where persistent files live. `DPLAB_HOME` overrides the default data home (`cache/data/`,
git-ignored); the SQLite store is `runs.sqlite3` inside it, downloaded datasets `datasets/`."""

import os
from pathlib import Path

DEFAULT_HOME = Path(__file__).resolve().parent / "data"


def data_home() -> Path:
    home = Path(os.environ.get("DPLAB_HOME") or DEFAULT_HOME)
    home.mkdir(parents=True, exist_ok=True)
    return home


def store_path() -> Path:
    return data_home() / "runs.sqlite3"


def datasets_dir() -> Path:
    return data_home() / "datasets"

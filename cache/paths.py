"""Where persistent files live. `DPLAB_HOME` overrides the default data home (`cache/data/`,
git-ignored); the SQLite store is `runs.sqlite3` inside it, downloaded datasets `datasets/`. A data home
that cannot be made a folder (a file is in the way, the disk is read-only or full) is a named `StoreError`."""

import os
from pathlib import Path

from cache.store.errors import StoreUnusable, failure

DEFAULT_HOME = Path(__file__).resolve().parent / "data"
STORE_FILE = "runs.sqlite3"


def data_home() -> Path:
    home = Path(os.environ.get("DPLAB_HOME") or DEFAULT_HOME)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if isinstance(exc, FileExistsError | NotADirectoryError):
            raise StoreUnusable(
                f"the data home {home} (DPLAB_HOME) is not a folder: point DPLAB_HOME at a folder"
            ) from exc
        named = failure(home / STORE_FILE, exc)
        if named is None:
            raise
        raise named from exc
    return home


def store_path() -> Path:
    return data_home() / STORE_FILE


def datasets_dir() -> Path:
    return data_home() / "datasets"

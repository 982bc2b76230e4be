"""Everything that persists: the SQLite store of runs and metrics, and the data home that holds it
(and downloaded datasets). Imports nothing from `engine` or `app`.
"""

from cache.paths import data_home, datasets_dir, store_path
from cache.store import RunRecord, RunStatus, Store, StoreError

__all__ = ["RunRecord", "RunStatus", "Store", "StoreError", "data_home", "datasets_dir", "store_path"]

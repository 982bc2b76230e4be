"""Everything that persists: the SQLite store of runs, metrics, sweeps and workers, and the data home
that holds it (and downloaded datasets). Imports nothing from `engine` or `app`.
"""

from cache.paths import data_home, datasets_dir, store_path
from cache.records import WORKER_LOST, Answer, RunEvent, RunRecord, RunStatus, SweepRecord, WorkerRecord
from cache.store import LostRun, NewRun, Store, StoreError

__all__ = [
    "WORKER_LOST",
    "Answer",
    "LostRun",
    "NewRun",
    "RunEvent",
    "RunRecord",
    "RunStatus",
    "Store",
    "StoreError",
    "SweepRecord",
    "WorkerRecord",
    "data_home",
    "datasets_dir",
    "store_path",
]

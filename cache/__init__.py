"""Everything that persists: the SQLite store of runs, metrics, sweeps and workers, and the data home
that holds it (and downloaded datasets). Imports nothing from `engine` or `app`.
"""

from cache.paths import data_home, datasets_dir, store_path
from cache.store import Store
from cache.store.errors import StoreDamaged, StoreError, StoreFull, StoreReadOnly, StoreTooNew, StoreUnusable
from cache.store.queue import LostRun
from cache.store.records import WORKER_LOST, Answer, RunEvent, RunRecord, RunStatus, SweepRecord, WorkerRecord
from cache.store.runs import NewRun

__all__ = [
    "WORKER_LOST",
    "Answer",
    "LostRun",
    "NewRun",
    "RunEvent",
    "RunRecord",
    "RunStatus",
    "Store",
    "StoreDamaged",
    "StoreError",
    "StoreFull",
    "StoreReadOnly",
    "StoreTooNew",
    "StoreUnusable",
    "SweepRecord",
    "WorkerRecord",
    "data_home",
    "datasets_dir",
    "store_path",
]

"""The SQLite store of runs, their status history, per-step metrics, sweeps and workers. Every SQL statement
of the project lives in this package, one module per concern:

- `connection`: a short-lived connection per transaction, the wait for the write lock, the migrations of
  `schema` applied at open; `errors`: a store file that cannot be used (not a store, damaged, read-only, a full
  disk, a newer schema), refused before SQLite writes to it and named; `records`: what the store holds, as
  immutable values;
- `runs`: creating runs (the one `INSERT INTO runs`), the run that answers a cache key, reading runs;
- `queue`: claiming, finishing, cancelling and requeuing runs, writing off the runs of a lost worker;
- `metrics`, `events` (status history), `sweeps`, `workers`, `names` (the names users give runs): one table
  (or two) each;
- `maintenance`: size, deletion, garbage collection, compaction, integrity;
- `archive_io`: the rows an export reads and an import inserts.

WAL mode (readers never block the writer, nor the reverse), a versioned schema migrated on open, JSON and
numbers only. Every method opens its own short-lived connection, so a `Store` can be shared by threads and
processes. Every status change happens inside a `BEGIN IMMEDIATE` transaction with a guard on the current
status (and owner), so two workers never claim one run and a worker written off as lost cannot overwrite
what happened to its run since. Each change appends to the run's status history (`run_events`). Runs that
share a stack id were submitted to train together; `claim_next_group` claims the queued ones of a stack at
once.
"""

from cache.store.maintenance import MaintenanceMixin
from cache.store.metrics import MetricsMixin
from cache.store.names import NamesMixin
from cache.store.queue import QueueMixin
from cache.store.status_history import EventsMixin
from cache.store.sweeps import SweepsMixin
from cache.store.workers import WorkersMixin


class Store(QueueMixin, SweepsMixin, MetricsMixin, EventsMixin, WorkersMixin, MaintenanceMixin, NamesMixin):
    """A store file, opened (and migrated) at construction; each method is one transaction."""

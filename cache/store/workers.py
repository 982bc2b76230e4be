"""The worker registry (`workers`): who is alive, on which run, and why each one stopped."""

import sqlite3
import time
from collections.abc import Iterable, Sequence

from cache.store.connection import StoreBase, placeholders
from cache.store.records import RunStatus, WorkerRecord


def release_runs(db: sqlite3.Connection, run_ids: Iterable[str]) -> None:
    """No worker is on these runs any more (they ended, went back to the queue or were deleted)."""
    db.executemany("UPDATE workers SET current_run = NULL WHERE current_run = ?", [(i,) for i in run_ids])


class WorkersMixin(StoreBase):
    def register_worker(self, name: str, *, backend: str, host: str, pid: int, device: str | None) -> None:
        now = time.time()
        with self.transaction(immediate=True) as db:
            db.execute(
                "INSERT OR REPLACE INTO workers (name, backend, host, pid, device, started_at, heartbeat_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, backend, host, pid, device, now, now),
            )

    def heartbeat(self, worker: str, run_ids: Sequence[str] = ()) -> set[str]:
        """A worker is alive and still on `run_ids`. Returns those of them with a cancel request."""
        now = time.time()
        with self.transaction(immediate=True) as db:
            db.execute("UPDATE workers SET heartbeat_at = ? WHERE name = ?", (now, worker))
            if not run_ids:
                return set()
            ids = list(run_ids)
            db.execute(
                f"UPDATE runs SET heartbeat_at = ? WHERE id IN ({placeholders(ids)}) AND status = ? AND worker = ?",
                (now, *ids, RunStatus.RUNNING.value, worker),
            )
            rows = db.execute(
                f"SELECT id FROM runs WHERE id IN ({placeholders(ids)}) AND cancel_requested = 1", ids
            ).fetchall()
        return {r["id"] for r in rows}

    def worker_stopped(self, worker: str, *, reason: str) -> None:
        with self.transaction(immediate=True) as db:
            db.execute(
                "UPDATE workers SET stopped_at = ?, stop_reason = ?, current_run = NULL WHERE name = ?",
                (time.time(), reason, worker),
            )

    def list_workers(self, *, include_stopped: bool = False, limit: int = 100) -> list[WorkerRecord]:
        query = "SELECT * FROM workers" + ("" if include_stopped else " WHERE stopped_at IS NULL")
        with self.transaction() as db:
            rows = db.execute(query + " ORDER BY started_at DESC LIMIT ?", (limit,)).fetchall()
        return [WorkerRecord.from_row(r) for r in rows]

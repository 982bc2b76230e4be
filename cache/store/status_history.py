"""A run's status history (`run_events`): appended at every status change, read oldest first, copied in
by an import."""

import sqlite3
import time
from collections.abc import Iterable

from cache.store.connection import StoreBase
from cache.store.records import RunEvent, RunStatus


def append_event(
    db: sqlite3.Connection,
    run_id: str,
    status: RunStatus,
    *,
    worker: str | None = None,
    detail: str | None = None,
    at: float | None = None,
) -> None:
    """The next entry of a run's history (its seq one past the last)."""
    db.execute(
        "INSERT INTO run_events (run_id, seq, at, status, worker, detail) VALUES"
        " (?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM run_events WHERE run_id = ?), ?, ?, ?, ?)",
        (run_id, run_id, at if at is not None else time.time(), status.value, worker, detail),
    )


def insert_events(db: sqlite3.Connection, run_id: str, events: Iterable[RunEvent]) -> None:
    """A run's history as it was recorded elsewhere (an import), each entry with its own seq."""
    db.executemany(
        "INSERT INTO run_events (run_id, seq, at, status, worker, detail) VALUES (?, ?, ?, ?, ?, ?)",
        [(run_id, e.seq, e.at, e.status.value, e.worker, e.detail) for e in events],
    )


def read_events(db: sqlite3.Connection, run_id: str) -> list[RunEvent]:
    """A run's status history, oldest first."""
    rows = db.execute("SELECT * FROM run_events WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
    return [
        RunEvent(
            run_id=r["run_id"],
            seq=r["seq"],
            at=r["at"],
            status=RunStatus(r["status"]),
            worker=r["worker"],
            detail=r["detail"],
        )
        for r in rows
    ]


def delete_events(db: sqlite3.Connection, run_ids: Iterable[str]) -> None:
    db.executemany("DELETE FROM run_events WHERE run_id = ?", [(i,) for i in run_ids])


class EventsMixin(StoreBase):
    def events(self, run_id: str) -> list[RunEvent]:
        """A run's status history, oldest first."""
        with self.transaction() as db:
            return read_events(db, run_id)

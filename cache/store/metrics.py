"""Per-step metrics (`metrics`): appended by a worker as it trains, read in step order, trimmed when a run
stops early, copied in by an import in bounded batches."""

import sqlite3
import time
from collections.abc import Iterable

from cache.store.connection import StoreBase, placeholders

METRIC_BATCH = 10_000  # rows per executemany: memory stays a batch, whatever a run holds


def read_metrics(db: sqlite3.Connection, run_id: str, *, after_step: int = -1) -> list[tuple[int, str, float]]:
    """(step, name, value) rows of a run after `after_step`, in step order."""
    return [
        tuple(r)
        for r in db.execute(
            "SELECT step, name, value FROM metrics WHERE run_id = ? AND step > ? ORDER BY step, name",
            (run_id, after_step),
        )
    ]


def every_metric(db: sqlite3.Connection, run_id: str) -> list[tuple[int, str, float]]:
    """Every (step, name, value) row of a run, in step order (what an export carries)."""
    query = "SELECT step, name, value FROM metrics WHERE run_id = ? ORDER BY step, name"
    return [tuple(m) for m in db.execute(query, (run_id,))]


def insert_metrics(db: sqlite3.Connection, run_id: str, rows: Iterable[tuple[int, str, float]]) -> int:
    """Insert a run's metric rows in batches of `METRIC_BATCH`; returns how many."""
    insert = "INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)"
    count, batch = 0, []
    for step, name, value in rows:
        batch.append((run_id, step, name, value))
        if len(batch) >= METRIC_BATCH:
            db.executemany(insert, batch)
            count, batch = count + len(batch), []
    db.executemany(insert, batch)
    return count + len(batch)


def delete_metrics(db: sqlite3.Connection, run_ids: Iterable[str]) -> None:
    db.executemany("DELETE FROM metrics WHERE run_id = ?", [(i,) for i in run_ids])


def cancel_flag(db: sqlite3.Connection, run_id: str) -> bool:
    """Whether a cancel has been requested for the run (False for an unknown one)."""
    row = db.execute("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
    return bool(row and row["cancel_requested"])


class MetricsMixin(StoreBase):
    def metrics(self, run_id: str, *, after_step: int = -1) -> list[tuple[int, str, float]]:
        """(step, name, value) rows of a run, in step order."""
        with self.transaction() as db:
            return read_metrics(db, run_id, after_step=after_step)

    def append_metrics(
        self, run_id: str, rows: Iterable[tuple[int, dict[str, float]]], *, advance: bool = True
    ) -> bool:
        """Store a batch of per-step metrics; with `advance`, also move progress and the heartbeat on
        (metrics computed ahead of training, like accountant curves, do not).

        Returns whether a cancel has been requested for the run.
        """
        batch = [(run_id, step, name, value) for step, values in rows for name, value in values.items()]
        last_step = max((step for _, step, _, _ in batch), default=None) if advance else None
        with self.transaction(immediate=True) as db:
            db.executemany("INSERT OR REPLACE INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)", batch)
            if last_step is not None:
                db.execute(
                    "UPDATE runs SET progress_step = MAX(progress_step, ?), heartbeat_at = ? WHERE id = ?",
                    (last_step, time.time(), run_id),
                )
            return cancel_flag(db, run_id)

    def trim_metrics(self, run_id: str, *, names: Iterable[str], after_step: int) -> None:
        """Drop the named metrics recorded for steps after `after_step` (a run that stopped early)."""
        wanted = list(names)
        with self.transaction(immediate=True) as db:
            db.execute(
                f"DELETE FROM metrics WHERE run_id = ? AND step > ? AND name IN ({placeholders(wanted)})",
                (run_id, after_step, *wanted),
            )

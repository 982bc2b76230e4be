"""The queue: claiming runs (alone, or a stack's queued runs together), ending them, cancelling and
requeuing them, and writing off the runs of a lost worker.

Every status change happens inside a `BEGIN IMMEDIATE` transaction with a guard on the current status
(and owner), so two workers never claim one run and a worker written off as lost cannot overwrite what
happened to its run since. Each change appends to the run's status history (`run_events`).
"""

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cache.store.connection import StoreError, placeholders
from cache.store.metrics import cancel_flag, delete_metrics
from cache.store.records import WORKER_LOST, RunRecord, RunStatus
from cache.store.runs import RunsMixin, run_status
from cache.store.status_history import append_event
from cache.store.workers import release_runs


@dataclass(frozen=True, kw_only=True)
class LostRun:
    run_id: str
    requeued: bool  # put back in the queue (its spec allowed one more attempt), else failed


def claim(db: sqlite3.Connection, ids: Sequence[str], *, worker: str, now: float) -> None:
    """Queued runs `ids` (checked by the caller, in this transaction) become RUNNING for `worker`."""
    db.execute(
        "UPDATE runs SET status = ?, worker = ?, started_at = ?, heartbeat_at = ?, attempts = attempts + 1"
        f" WHERE id IN ({placeholders(ids)})",
        (RunStatus.RUNNING.value, worker, now, now, *ids),
    )
    for run_id in ids:
        append_event(db, run_id, RunStatus.RUNNING, worker=worker, at=now)
    db.execute("UPDATE workers SET current_run = ?, heartbeat_at = ? WHERE name = ?", (ids[0], now, worker))


def requeue_in(db: sqlite3.Connection, run_id: str, *, worker: str | None, reason: str) -> bool:
    """`Store.requeue` inside the caller's transaction. The attempt that ends is added to the run's earlier
    attempts: its last stored step, and whether it stored anything (what it stored was shown, so released)."""
    guard, args = ("", []) if worker is None else (" AND worker = ?", [worker])
    row = db.execute(
        "SELECT progress_step, earlier_attempts_json FROM runs WHERE id = ? AND status = ?" + guard,
        (run_id, RunStatus.RUNNING.value, *args),
    ).fetchone()
    if row is None:
        return False
    released = db.execute("SELECT 1 FROM metrics WHERE run_id = ? LIMIT 1", (run_id,)).fetchone() is not None
    attempt = {"steps": row["progress_step"], "released": released, "reason": reason}
    earlier = json.dumps([*json.loads(row["earlier_attempts_json"] or "[]"), attempt])
    changed = db.execute(
        "UPDATE runs SET status = ?, worker = NULL, started_at = NULL, heartbeat_at = NULL, progress_step = 0,"
        " plan_json = NULL, total_steps = NULL, cancel_requested = 0, earlier_attempts_json = ?"
        " WHERE id = ? AND status = ?" + guard,
        (RunStatus.QUEUED.value, earlier, run_id, RunStatus.RUNNING.value, *args),
    ).rowcount
    if changed:
        delete_metrics(db, [run_id])
        append_event(db, run_id, RunStatus.QUEUED, worker=worker, detail=reason)
        release_runs(db, [run_id])
    return bool(changed)


def lose(db: sqlite3.Connection, row: sqlite3.Row, reason: str) -> LostRun:
    """A running run whose worker is gone: back in the queue once if its spec asked for it, else
    failed with `reason` (which starts with "worker lost"). Its metrics up to its last step are kept when it fails."""
    if row["requeues_left"] > 0:
        db.execute("UPDATE runs SET requeues_left = requeues_left - 1 WHERE id = ?", (row["id"],))
        requeue_in(db, row["id"], worker=None, reason=f"{reason}; requeued")
        return LostRun(run_id=row["id"], requeued=True)
    db.execute(
        "UPDATE runs SET status = ?, finished_at = ?, error = ? WHERE id = ? AND status = ?",
        (RunStatus.FAILED.value, time.time(), reason, row["id"], RunStatus.RUNNING.value),
    )  # the rows past its last step are curves the worker computed ahead (ε planned, not spent): dropped
    db.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", (row["id"], row["progress_step"]))
    append_event(db, row["id"], RunStatus.FAILED, worker=row["worker"], detail=reason)
    return LostRun(run_id=row["id"], requeued=False)


class QueueMixin(RunsMixin):
    def claim_next(self, worker: str) -> RunRecord | None:
        """Atomically move the oldest queued run to RUNNING for `worker` (alone, even if it has a stack:
        it then trains on its own)."""
        now = time.time()
        with self.transaction(immediate=True) as db:
            row = db.execute(
                "SELECT id FROM runs WHERE status = ? ORDER BY created_at LIMIT 1", (RunStatus.QUEUED.value,)
            ).fetchone()
            if row is None:
                return None
            claim(db, [row["id"]], worker=worker, now=now)
        return self.get_run(row["id"])

    def claim_next_group(self, worker: str) -> list[RunRecord]:
        """Atomically move the oldest queued run to RUNNING for `worker`, with every other queued run of
        its stack (in submission order): the runs to train together. Empty when the queue is."""
        now = time.time()
        with self.transaction(immediate=True) as db:
            row = db.execute(
                "SELECT id, stack_id FROM runs WHERE status = ? ORDER BY created_at LIMIT 1",
                (RunStatus.QUEUED.value,),
            ).fetchone()
            if row is None:
                return []
            ids = [row["id"]]
            if row["stack_id"] is not None:
                ids += [
                    r["id"]
                    for r in db.execute(
                        "SELECT id FROM runs WHERE stack_id = ? AND status = ? AND id != ? ORDER BY created_at, rowid",
                        (row["stack_id"], RunStatus.QUEUED.value, row["id"]),
                    )
                ]
            claim(db, ids, worker=worker, now=now)
            rows = {r["id"]: r for r in db.execute(f"SELECT * FROM runs WHERE id IN ({placeholders(ids)})", ids)}
        return [RunRecord.from_row(rows[i]) for i in ids]

    def finish(
        self,
        run_id: str,
        *,
        status: RunStatus,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        worker: str | None = None,
    ) -> bool:
        """End a running run. With `worker`, only if that worker still owns it (a worker written off as
        lost does not overwrite a requeue or a failure). Returns whether the run was changed."""
        guard, args = "", []
        if worker is not None:
            guard, args = " AND worker = ?", [worker]
        with self.transaction(immediate=True) as db:
            changed = db.execute(
                "UPDATE runs SET status = ?, finished_at = ?, result_json = ?, error = ? WHERE id = ? AND status = ?"
                + guard,
                (
                    status.value,
                    time.time(),
                    json.dumps(result) if result is not None else None,
                    error,
                    run_id,
                    RunStatus.RUNNING.value,
                    *args,
                ),
            ).rowcount
            if changed:
                append_event(db, run_id, status, worker=worker, detail=error)
                release_runs(db, [run_id])
        return bool(changed)

    def request_cancel(self, run_id: str) -> RunStatus:
        """A queued run is cancelled at once; a running one is flagged and stops within a step."""
        with self.transaction(immediate=True) as db:
            status = run_status(db, run_id)
            if status is None:
                raise StoreError(f"no run with id {run_id!r}")
            if status is RunStatus.QUEUED:
                db.execute(
                    "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                    (RunStatus.CANCELLED.value, time.time(), run_id),
                )
                append_event(db, run_id, RunStatus.CANCELLED, detail="cancelled before it started")
                return RunStatus.CANCELLED
            if status is RunStatus.RUNNING:
                db.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run_id,))
            return status

    def cancel_requested(self, run_id: str) -> bool:
        with self.transaction() as db:
            return cancel_flag(db, run_id)

    def requeue(self, run_id: str, *, worker: str | None = None, reason: str = "worker stopping") -> bool:
        """Put a running run back in the queue, dropping its partial metrics (it restarts from scratch) and
        keeping what it released as an earlier attempt (`RunRecord.earlier_attempts`)."""
        with self.transaction(immediate=True) as db:
            return requeue_in(db, run_id, worker=worker, reason=reason)

    def fail_stale(self, *, older_than_s: float) -> list[LostRun]:
        """Runs whose heartbeat is older than `older_than_s`: their worker is lost (killed, out of
        memory, machine restarted)."""
        cutoff = time.time() - older_than_s
        with self.transaction(immediate=True) as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE status = ? AND heartbeat_at < ?", (RunStatus.RUNNING.value, cutoff)
            ).fetchall()
            lost = [
                lose(
                    db,
                    row,
                    f"{WORKER_LOST}: no heartbeat from {row['worker']} for {time.time() - row['heartbeat_at']:.0f} s",
                )
                for row in rows
            ]
            db.execute(
                "UPDATE workers SET stopped_at = ?, stop_reason = ? WHERE stopped_at IS NULL AND heartbeat_at < ?",
                (time.time(), "no heartbeat", cutoff),
            )
        return lost

    def fail_worker_runs(self, worker: str, *, reason: str) -> list[LostRun]:
        """The runs of a worker known to be dead (its supervisor saw it exit, Ray reported its node lost)."""
        with self.transaction(immediate=True) as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE status = ? AND worker = ?", (RunStatus.RUNNING.value, worker)
            ).fetchall()
            lost = [lose(db, row, reason) for row in rows]
            db.execute(
                "UPDATE workers SET stopped_at = COALESCE(stopped_at, ?), stop_reason = ?, current_run = NULL"
                " WHERE name = ?",
                (time.time(), reason, worker),
            )
        return lost

    def lose_run(self, run_id: str, *, worker: str, reason: str) -> LostRun | None:
        """One run of `worker` is lost while its other runs go on (Ray reported the task's worker or node
        dead): failed with `reason`, or requeued once. None if `worker` no longer owns it."""
        with self.transaction(immediate=True) as db:
            row = db.execute(
                "SELECT * FROM runs WHERE id = ? AND status = ? AND worker = ?",
                (run_id, RunStatus.RUNNING.value, worker),
            ).fetchone()
            return lose(db, row, reason) if row is not None else None

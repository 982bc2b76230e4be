"""The SQLite store of runs, their status history, per-step metrics, sweeps and workers.

WAL mode (readers never block the writer, nor the reverse), a versioned schema migrated on open
(`cache.schema`), JSON and numbers only. Every method opens its own short-lived connection, so a
`Store` can be shared by threads and processes. Every status change happens inside a
`BEGIN IMMEDIATE` transaction with a guard on the current status (and owner), so two workers never
claim one run and a worker written off as lost cannot overwrite what happened to its run since.
Each change appends to the run's status history (`run_events`). Runs that share a stack id were
submitted to train together; `claim_next_group` claims the queued ones of a stack at once.

A submission (`submit`, `create_sweep`) looks for a run that already answers its cache key and inserts
a new one only if none does, in the same `BEGIN IMMEDIATE` transaction: any number of processes
submitting one spec at once create one run. What answers a key is `answering_run`: the newest finished
run with that key (a cache hit), else a queued or running one. Imported runs keep a key of their own
(`imported:...`) unless the user chose, at import, to let them answer this store's submissions.
"""

import json
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cache.records import WORKER_LOST, Answer, RunEvent, RunRecord, RunStatus, SweepRecord, WorkerRecord
from cache.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_S = 30.0  # how long a transaction waits for the write lock before retrying
LOCK_RETRY_DEADLINE_S = 300.0  # total time before "database is locked" is let through


class StoreError(RuntimeError):
    """The store cannot do what was asked (unknown run, newer schema, ...)."""


@dataclass(frozen=True, kw_only=True)
class NewRun:
    """A run to create: its canonical spec, identity and what to do if its worker is lost."""

    spec: dict[str, Any]
    cache_key: str
    engine_version: str
    requeues: int = 0
    plan: dict[str, Any] | None = None  # numbers planned at submission (the worker checks and replaces them)
    stack: str | None = None  # the stack id of runs to be trained together as one vectorized model


@dataclass(frozen=True, kw_only=True)
class LostRun:
    run_id: str
    requeued: bool  # put back in the queue (its spec allowed one more attempt), else failed


def _placeholders(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class Store:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the database file
        finally:
            db.close()
        with self.transaction(immediate=True) as db:
            self._migrate(db)

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def transaction(self, *, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction on a fresh connection. `immediate` takes the write lock up front (every
        write does: a read transaction upgraded to a write can fail without waiting)."""
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")
            self._begin(db, "BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    @staticmethod
    def _begin(db: sqlite3.Connection, statement: str) -> None:
        deadline = time.monotonic() + LOCK_RETRY_DEADLINE_S
        while True:
            try:
                db.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version} is newer than this code ({SCHEMA_VERSION})")
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={number + 1}")

    @staticmethod
    def _event(
        db: sqlite3.Connection,
        run_id: str,
        status: RunStatus,
        *,
        worker: str | None = None,
        detail: str | None = None,
        at: float | None = None,
    ) -> None:
        db.execute(
            "INSERT INTO run_events (run_id, seq, at, status, worker, detail) VALUES"
            " (?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM run_events WHERE run_id = ?), ?, ?, ?, ?)",
            (run_id, run_id, at if at is not None else time.time(), status.value, worker, detail),
        )

    # ------------------------------------------------------------------ creating runs and sweeps

    def _insert_run(self, db: sqlite3.Connection, new: NewRun, *, status: RunStatus, worker: str | None) -> str:
        run_id = uuid.uuid4().hex[:12]
        now = time.time()
        running = status is RunStatus.RUNNING
        db.execute(
            "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at, started_at,"
            " heartbeat_at, worker, attempts, requeues_left, plan_json, stack_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                new.cache_key,
                json.dumps(new.spec, sort_keys=True),
                new.engine_version,
                status.value,
                now,
                now if running else None,
                now if running else None,
                worker,
                int(running),
                new.requeues,
                json.dumps(new.plan) if new.plan is not None else None,
                new.stack,
            ),
        )
        self._event(db, run_id, RunStatus.QUEUED, detail="submitted", at=now)
        if running:
            self._event(db, run_id, RunStatus.RUNNING, worker=worker, at=now)
        return run_id

    def create_run(
        self,
        *,
        spec: dict[str, Any],
        cache_key: str,
        engine_version: str,
        status: RunStatus = RunStatus.QUEUED,
        worker: str | None = None,
        requeues: int = 0,
        plan: dict[str, Any] | None = None,
    ) -> str:
        """A new run, queued (or RUNNING for `worker`, when the caller trains it in the foreground)."""
        new = NewRun(spec=spec, cache_key=cache_key, engine_version=engine_version, requeues=requeues, plan=plan)
        with self.transaction(immediate=True) as db:
            return self._insert_run(db, new, status=status, worker=worker)

    @staticmethod
    def _answering(db: sqlite3.Connection, cache_key: str) -> tuple[str, Answer] | None:
        """The run that answers `cache_key` (the newest finished one: CACHED; else the newest queued or
        running one: EXISTING), or None."""
        row = db.execute(
            "SELECT id FROM runs WHERE cache_key = ? AND status = ? ORDER BY created_at DESC LIMIT 1",
            (cache_key, RunStatus.FINISHED.value),
        ).fetchone()
        if row is not None:
            return row["id"], Answer.CACHED
        row = db.execute(
            "SELECT id FROM runs WHERE cache_key = ? AND status IN (?, ?) ORDER BY created_at DESC LIMIT 1",
            (cache_key, RunStatus.QUEUED.value, RunStatus.RUNNING.value),
        ).fetchone()
        return (row["id"], Answer.EXISTING) if row is not None else None

    def answering_run(self, cache_key: str) -> tuple[str, Answer] | None:
        """(id, CACHED or EXISTING) of the run that answers `cache_key` now, or None."""
        with self.transaction() as db:
            return self._answering(db, cache_key)

    def _submit(self, db: sqlite3.Connection, new: NewRun, *, force: bool) -> tuple[str, Answer]:
        if not force and (answer := self._answering(db, new.cache_key)) is not None:
            return answer
        return self._insert_run(db, new, status=RunStatus.QUEUED, worker=None), Answer.CREATED

    def submit(self, new: NewRun, *, force: bool = False) -> tuple[str, Answer]:
        """Queue `new` unless a run already answers its key (`force`: queue it anyway), in one transaction."""
        with self.transaction(immediate=True) as db:
            return self._submit(db, new, force=force)

    def create_sweep(
        self,
        *,
        spec: dict[str, Any],
        name: str | None,
        members: Sequence[tuple[dict[str, Any], NewRun | str]],
        force: bool = False,
    ) -> tuple[str, list[tuple[str, Answer]]]:
        """A sweep and its runs in one transaction. Each member is (grid point, its run), queued as by
        `submit`: a member whose key a run already answers joins the sweep as that run (and leaves its
        stack); or (grid point, the id of a run in the store), which joins as it is (EXISTING). Returns the
        sweep id and each member's (run id, answer), in order."""
        sweep_id = "s" + uuid.uuid4().hex[:11]
        answers = []
        with self.transaction(immediate=True) as db:
            db.execute(
                "INSERT INTO sweeps (id, name, spec_json, created_at) VALUES (?, ?, ?, ?)",
                (sweep_id, name, json.dumps(spec, sort_keys=True), time.time()),
            )
            for position, (point, member) in enumerate(members):
                if isinstance(member, str):
                    if db.execute("SELECT 1 FROM runs WHERE id = ?", (member,)).fetchone() is None:
                        raise StoreError(f"no run with id {member!r:.80}")
                    run_id, answer = member, Answer.EXISTING
                else:
                    run_id, answer = self._submit(db, member, force=force)
                db.execute(
                    "INSERT INTO sweep_runs (sweep_id, run_id, position, point_json) VALUES (?, ?, ?, ?)",
                    (sweep_id, run_id, position, json.dumps(point, sort_keys=True)),
                )
                answers.append((run_id, answer))
        return sweep_id, answers

    # ------------------------------------------------------------------ reading

    def get_run(self, run_id: str) -> RunRecord:
        with self.transaction() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run with id {run_id!r}")
        return RunRecord.from_row(row)

    def list_runs(
        self, *, limit: int = 500, statuses: Iterable[RunStatus] | None = None, sweep_id: str | None = None
    ) -> list[RunRecord]:
        """Runs, newest first (a sweep's runs in grid order)."""
        query, where, args = "SELECT runs.* FROM runs", [], []
        if sweep_id is not None:
            query += " JOIN sweep_runs ON sweep_runs.run_id = runs.id"
            where.append("sweep_runs.sweep_id = ?")
            args.append(sweep_id)
        if statuses is not None:
            wanted = [s.value for s in statuses]
            where.append(f"runs.status IN ({_placeholders(wanted)})")
            args += wanted
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY sweep_runs.position" if sweep_id is not None else " ORDER BY runs.created_at DESC"
        with self.transaction() as db:
            return [RunRecord.from_row(r) for r in db.execute(query + " LIMIT ?", (*args, limit))]

    def events(self, run_id: str) -> list[RunEvent]:
        """A run's status history, oldest first."""
        with self.transaction() as db:
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

    def get_sweep(self, sweep_id: str) -> SweepRecord:
        with self.transaction() as db:
            row = db.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id!r}")
            members = db.execute(
                "SELECT run_id, point_json FROM sweep_runs WHERE sweep_id = ? ORDER BY position", (sweep_id,)
            ).fetchall()
        return SweepRecord(
            id=row["id"],
            name=row["name"],
            spec=json.loads(row["spec_json"]),
            created_at=row["created_at"],
            run_ids=tuple(m["run_id"] for m in members),
            points=tuple(json.loads(m["point_json"]) for m in members),
        )

    def list_sweeps(self, *, limit: int = 100) -> list[SweepRecord]:
        with self.transaction() as db:
            ids = [r["id"] for r in db.execute("SELECT id FROM sweeps ORDER BY created_at DESC LIMIT ?", (limit,))]
        return [self.get_sweep(i) for i in ids]

    def metrics(self, run_id: str, *, after_step: int = -1) -> list[tuple[int, str, float]]:
        """(step, name, value) rows of a run, in step order."""
        with self.transaction() as db:
            return [
                tuple(r)
                for r in db.execute(
                    "SELECT step, name, value FROM metrics WHERE run_id = ? AND step > ? ORDER BY step, name",
                    (run_id, after_step),
                )
            ]

    # ------------------------------------------------------------------ the queue

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
            self._claim(db, [row["id"]], worker=worker, now=now)
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
            self._claim(db, ids, worker=worker, now=now)
            rows = {r["id"]: r for r in db.execute(f"SELECT * FROM runs WHERE id IN ({_placeholders(ids)})", ids)}
        return [RunRecord.from_row(rows[i]) for i in ids]

    def _claim(self, db: sqlite3.Connection, ids: Sequence[str], *, worker: str, now: float) -> None:
        """Queued runs `ids` (checked by the caller, in this transaction) become RUNNING for `worker`."""
        db.execute(
            "UPDATE runs SET status = ?, worker = ?, started_at = ?, heartbeat_at = ?, attempts = attempts + 1"
            f" WHERE id IN ({_placeholders(ids)})",
            (RunStatus.RUNNING.value, worker, now, now, *ids),
        )
        for run_id in ids:
            self._event(db, run_id, RunStatus.RUNNING, worker=worker, at=now)
        db.execute("UPDATE workers SET current_run = ?, heartbeat_at = ? WHERE name = ?", (ids[0], now, worker))

    def set_plan(self, run_id: str, *, plan: dict[str, Any], total_steps: int) -> None:
        with self.transaction(immediate=True) as db:
            db.execute(
                "UPDATE runs SET plan_json = ?, total_steps = ? WHERE id = ?", (json.dumps(plan), total_steps, run_id)
            )

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
            row = db.execute("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
        return bool(row and row["cancel_requested"])

    def trim_metrics(self, run_id: str, *, names: Iterable[str], after_step: int) -> None:
        """Drop the named metrics recorded for steps after `after_step` (a run that stopped early)."""
        wanted = list(names)
        with self.transaction(immediate=True) as db:
            db.execute(
                f"DELETE FROM metrics WHERE run_id = ? AND step > ? AND name IN ({_placeholders(wanted)})",
                (run_id, after_step, *wanted),
            )

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
                self._event(db, run_id, status, worker=worker, detail=error)
                db.execute("UPDATE workers SET current_run = NULL WHERE current_run = ?", (run_id,))
        return bool(changed)

    def request_cancel(self, run_id: str) -> RunStatus:
        """A queued run is cancelled at once; a running one is flagged and stops within a step."""
        with self.transaction(immediate=True) as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run with id {run_id!r}")
            status = RunStatus(row["status"])
            if status is RunStatus.QUEUED:
                db.execute(
                    "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                    (RunStatus.CANCELLED.value, time.time(), run_id),
                )
                self._event(db, run_id, RunStatus.CANCELLED, detail="cancelled before it started")
                return RunStatus.CANCELLED
            if status is RunStatus.RUNNING:
                db.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run_id,))
            return status

    def cancel_requested(self, run_id: str) -> bool:
        with self.transaction() as db:
            row = db.execute("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
        return bool(row and row["cancel_requested"])

    def requeue(self, run_id: str, *, worker: str | None = None, reason: str = "worker stopping") -> bool:
        """Put a running run back in the queue, dropping its partial metrics (it restarts from scratch)."""
        with self.transaction(immediate=True) as db:
            return self._requeue(db, run_id, worker=worker, reason=reason)

    def _requeue(self, db: sqlite3.Connection, run_id: str, *, worker: str | None, reason: str) -> bool:
        guard, args = ("", []) if worker is None else (" AND worker = ?", [worker])
        changed = db.execute(
            "UPDATE runs SET status = ?, worker = NULL, started_at = NULL, heartbeat_at = NULL, progress_step = 0,"
            " plan_json = NULL, total_steps = NULL, cancel_requested = 0 WHERE id = ? AND status = ?" + guard,
            (RunStatus.QUEUED.value, run_id, RunStatus.RUNNING.value, *args),
        ).rowcount
        if changed:
            db.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            self._event(db, run_id, RunStatus.QUEUED, worker=worker, detail=reason)
            db.execute("UPDATE workers SET current_run = NULL WHERE current_run = ?", (run_id,))
        return bool(changed)

    # ------------------------------------------------------------------ lost workers

    def _lose(self, db: sqlite3.Connection, row: sqlite3.Row, reason: str) -> LostRun:
        """A running run whose worker is gone: back in the queue once if its spec asked for it, else
        failed with `reason` (which starts with "worker lost"). Its metrics so far are kept when it fails."""
        if row["requeues_left"] > 0:
            db.execute("UPDATE runs SET requeues_left = requeues_left - 1 WHERE id = ?", (row["id"],))
            self._requeue(db, row["id"], worker=None, reason=f"{reason}; requeued")
            return LostRun(run_id=row["id"], requeued=True)
        db.execute(
            "UPDATE runs SET status = ?, finished_at = ?, error = ? WHERE id = ? AND status = ?",
            (RunStatus.FAILED.value, time.time(), reason, row["id"], RunStatus.RUNNING.value),
        )
        self._event(db, row["id"], RunStatus.FAILED, worker=row["worker"], detail=reason)
        return LostRun(run_id=row["id"], requeued=False)

    def fail_stale(self, *, older_than_s: float) -> list[LostRun]:
        """Runs whose heartbeat is older than `older_than_s`: their worker is lost (killed, out of
        memory, machine restarted)."""
        cutoff = time.time() - older_than_s
        with self.transaction(immediate=True) as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE status = ? AND heartbeat_at < ?", (RunStatus.RUNNING.value, cutoff)
            ).fetchall()
            lost = [
                self._lose(
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
            lost = [self._lose(db, row, reason) for row in rows]
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
            return self._lose(db, row, reason) if row is not None else None

    # ------------------------------------------------------------------ workers

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
                f"UPDATE runs SET heartbeat_at = ? WHERE id IN ({_placeholders(ids)}) AND status = ? AND worker = ?",
                (now, *ids, RunStatus.RUNNING.value, worker),
            )
            rows = db.execute(
                f"SELECT id FROM runs WHERE id IN ({_placeholders(ids)}) AND cancel_requested = 1", ids
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

    def integrity_ok(self) -> bool:
        with self.transaction() as db:
            return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

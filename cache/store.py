"""The SQLite store of runs, their status and per-step metrics.

WAL mode (readers never block the writer, nor the reverse), a versioned schema migrated on open,
JSON and numbers only. Every method opens its own short-lived connection, so a `Store` can be
shared by threads and processes; status changes that race (claiming a queued run) happen inside
`BEGIN IMMEDIATE` transactions.
"""

import json
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any


class StoreError(RuntimeError):
    """The store cannot do what was asked (unknown run, newer schema, ...)."""


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (RunStatus.QUEUED, RunStatus.RUNNING)


MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        cache_key TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        engine_version TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        heartbeat_at REAL,
        worker TEXT,
        total_steps INTEGER,
        progress_step INTEGER NOT NULL DEFAULT 0,
        plan_json TEXT,
        result_json TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_by_status ON runs (status, created_at);
    CREATE INDEX runs_by_key ON runs (cache_key, status);
    CREATE TABLE metrics (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        name TEXT NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_id, step, name)
    ) WITHOUT ROWID;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    id: str
    cache_key: str
    spec: dict[str, Any]
    engine_version: str
    status: RunStatus
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat_at: float | None
    worker: str | None
    total_steps: int | None
    progress_step: int
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    error: str | None
    cancel_requested: bool

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "RunRecord":
        return cls(
            id=row["id"],
            cache_key=row["cache_key"],
            spec=json.loads(row["spec_json"]),
            engine_version=row["engine_version"],
            status=RunStatus(row["status"]),
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            heartbeat_at=row["heartbeat_at"],
            worker=row["worker"],
            total_steps=row["total_steps"],
            progress_step=row["progress_step"],
            plan=json.loads(row["plan_json"]) if row["plan_json"] else None,
            result=json.loads(row["result_json"]) if row["result_json"] else None,
            error=row["error"],
            cancel_requested=bool(row["cancel_requested"]),
        )

    def summary(self) -> dict[str, Any]:
        """The machine-readable line of `runs --json`."""
        return {
            "id": self.id,
            "status": self.status.value,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "progress_step": self.progress_step,
            "total_steps": self.total_steps,
            "error": self.error,
            "spec": self.spec,
            "result": self.result,
        }


class Store:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the database file
        finally:
            db.close()
        with self._connect(immediate=True) as db:
            self._migrate(db)

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _connect(self, *, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA synchronous=NORMAL")
        try:
            db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version} is newer than this code ({SCHEMA_VERSION})")
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={number + 1}")

    # ------------------------------------------------------------------ runs

    def create_run(
        self,
        *,
        spec: dict[str, Any],
        cache_key: str,
        engine_version: str,
        status: RunStatus = RunStatus.QUEUED,
        worker: str | None = None,
    ) -> str:
        run_id = uuid.uuid4().hex[:12]
        now = time.time()
        running = status is RunStatus.RUNNING
        with self._connect(immediate=True) as db:
            db.execute(
                "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at, started_at,"
                " heartbeat_at, worker) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    cache_key,
                    json.dumps(spec, sort_keys=True),
                    engine_version,
                    status.value,
                    now,
                    now if running else None,
                    now if running else None,
                    worker,
                ),
            )
        return run_id

    def get_run(self, run_id: str) -> RunRecord:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run with id {run_id!r}")
        return RunRecord.from_row(row)

    def list_runs(self, *, limit: int = 500, statuses: Iterable[RunStatus] | None = None) -> list[RunRecord]:
        query, args = "SELECT * FROM runs", []
        if statuses is not None:
            wanted = [s.value for s in statuses]
            query += f" WHERE status IN ({','.join('?' * len(wanted))})"
            args += wanted
        query += " ORDER BY created_at DESC LIMIT ?"
        with self._connect() as db:
            return [RunRecord.from_row(r) for r in db.execute(query, (*args, limit))]

    def find_by_key(self, cache_key: str, statuses: Iterable[RunStatus]) -> RunRecord | None:
        """The newest run with this cache key in one of `statuses`."""
        wanted = [s.value for s in statuses]
        with self._connect() as db:
            row = db.execute(
                f"SELECT * FROM runs WHERE cache_key = ? AND status IN ({','.join('?' * len(wanted))})"
                " ORDER BY created_at DESC LIMIT 1",
                (cache_key, *wanted),
            ).fetchone()
        return RunRecord.from_row(row) if row else None

    def claim_next(self, worker: str) -> RunRecord | None:
        """Atomically move the oldest queued run to RUNNING for `worker`."""
        now = time.time()
        with self._connect(immediate=True) as db:
            row = db.execute(
                "SELECT id FROM runs WHERE status = ? ORDER BY created_at LIMIT 1", (RunStatus.QUEUED.value,)
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE runs SET status = ?, worker = ?, started_at = ?, heartbeat_at = ? WHERE id = ?",
                (RunStatus.RUNNING.value, worker, now, now, row["id"]),
            )
        return self.get_run(row["id"])

    def set_plan(self, run_id: str, *, plan: dict[str, Any], total_steps: int) -> None:
        with self._connect(immediate=True) as db:
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
        with self._connect(immediate=True) as db:
            db.executemany("INSERT OR REPLACE INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)", batch)
            if last_step is not None:
                db.execute(
                    "UPDATE runs SET progress_step = MAX(progress_step, ?), heartbeat_at = ? WHERE id = ?",
                    (last_step, time.time(), run_id),
                )
            row = db.execute("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
        return bool(row and row["cancel_requested"])

    def metrics(self, run_id: str, *, after_step: int = -1) -> list[tuple[int, str, float]]:
        """(step, name, value) rows of a run, in step order."""
        with self._connect() as db:
            return [
                tuple(r)
                for r in db.execute(
                    "SELECT step, name, value FROM metrics WHERE run_id = ? AND step > ? ORDER BY step",
                    (run_id, after_step),
                )
            ]

    def trim_metrics(self, run_id: str, *, names: Iterable[str], after_step: int) -> None:
        """Drop the named metrics recorded for steps after `after_step` (a run that stopped early)."""
        wanted = list(names)
        with self._connect(immediate=True) as db:
            db.execute(
                f"DELETE FROM metrics WHERE run_id = ? AND step > ? AND name IN ({','.join('?' * len(wanted))})",
                (run_id, after_step, *wanted),
            )

    def finish(
        self, run_id: str, *, status: RunStatus, result: dict[str, Any] | None = None, error: str | None = None
    ) -> None:
        with self._connect(immediate=True) as db:
            db.execute(
                "UPDATE runs SET status = ?, finished_at = ?, result_json = ?, error = ? WHERE id = ?",
                (status.value, time.time(), json.dumps(result) if result is not None else None, error, run_id),
            )

    def request_cancel(self, run_id: str) -> RunStatus:
        """A queued run is cancelled at once; a running one is flagged and stops within a step."""
        with self._connect(immediate=True) as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run with id {run_id!r}")
            status = RunStatus(row["status"])
            if status is RunStatus.QUEUED:
                db.execute(
                    "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                    (RunStatus.CANCELLED.value, time.time(), run_id),
                )
                return RunStatus.CANCELLED
            if status is RunStatus.RUNNING:
                db.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run_id,))
            return status

    def requeue(self, run_id: str) -> None:
        """Put a running run back in the queue, dropping its partial metrics."""
        with self._connect(immediate=True) as db:
            db.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            db.execute(
                "UPDATE runs SET status = ?, worker = NULL, started_at = NULL, heartbeat_at = NULL,"
                " progress_step = 0, plan_json = NULL, total_steps = NULL WHERE id = ? AND status = ?",
                (RunStatus.QUEUED.value, run_id, RunStatus.RUNNING.value),
            )

    def fail_stale(self, *, older_than_s: float) -> list[str]:
        """Mark running runs whose heartbeat is older than `older_than_s` as failed: worker lost."""
        cutoff = time.time() - older_than_s
        with self._connect(immediate=True) as db:
            ids = [
                r["id"]
                for r in db.execute(
                    "SELECT id FROM runs WHERE status = ? AND heartbeat_at < ?", (RunStatus.RUNNING.value, cutoff)
                )
            ]
            db.executemany(
                "UPDATE runs SET status = ?, finished_at = ?, error = ? WHERE id = ?",
                [(RunStatus.FAILED.value, time.time(), "worker lost: no heartbeat", i) for i in ids],
            )
        return ids

    def integrity_ok(self) -> bool:
        with self._connect() as db:
            return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

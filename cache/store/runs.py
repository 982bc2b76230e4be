"""Runs (`runs`): creating them (a submission, or a copy by an import: one `INSERT INTO runs`), finding the
run that answers a cache key, reading them.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cache.store.connection import StoreBase, StoreError, placeholders
from cache.store.records import Answer, RunRecord, RunStatus
from cache.store.status_history import append_event


@dataclass(frozen=True, kw_only=True)
class NewRun:
    """A run to create: its canonical spec, identity and what to do if its worker is lost."""

    spec: dict[str, Any]
    cache_key: str
    engine_version: str
    requeues: int = 0
    plan: dict[str, Any] | None = None  # numbers planned at submission (the worker checks and replaces them)
    stack: str | None = None  # the stack id of runs to be trained together as one vectorized model


def insert_run_row(
    db: sqlite3.Connection,
    *,
    run_id: str,
    cache_key: str,
    spec: dict[str, Any],
    engine_version: str,
    status: RunStatus,
    created_at: float,
    started_at: float | None = None,
    finished_at: float | None = None,
    heartbeat_at: float | None = None,
    worker: str | None = None,
    total_steps: int | None = None,
    progress_step: int = 0,
    plan: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
    error: str | None = None,
    attempts: int = 0,
    requeues_left: int = 0,
    imported: bool = False,
    stack_id: str | None = None,
) -> None:
    """The one statement that adds a run; the defaults are the schema's (the cancel flag starts down)."""
    db.execute(
        "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at, started_at, finished_at,"
        " heartbeat_at, worker, total_steps, progress_step, plan_json, result_json, error, attempts, requeues_left,"
        " imported, stack_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            cache_key,
            json.dumps(spec, sort_keys=True),
            engine_version,
            status.value,
            created_at,
            started_at,
            finished_at,
            heartbeat_at,
            worker,
            total_steps,
            progress_step,
            json.dumps(plan) if plan is not None else None,
            json.dumps(result) if result is not None else None,
            error,
            attempts,
            requeues_left,
            int(imported),
            stack_id,
        ),
    )


def insert_new_run(db: sqlite3.Connection, new: NewRun, *, status: RunStatus, worker: str | None) -> str:
    """A new run, queued (or RUNNING for `worker`), with its first status history; returns its id."""
    run_id = uuid.uuid4().hex[:12]
    now = time.time()
    running = status is RunStatus.RUNNING
    insert_run_row(
        db,
        run_id=run_id,
        cache_key=new.cache_key,
        spec=new.spec,
        engine_version=new.engine_version,
        status=status,
        created_at=now,
        started_at=now if running else None,
        heartbeat_at=now if running else None,
        worker=worker,
        attempts=int(running),
        requeues_left=new.requeues,
        plan=new.plan,
        stack_id=new.stack,
    )
    append_event(db, run_id, RunStatus.QUEUED, detail="submitted", at=now)
    if running:
        append_event(db, run_id, RunStatus.RUNNING, worker=worker, at=now)
    return run_id


def answering(db: sqlite3.Connection, cache_key: str) -> tuple[str, Answer] | None:
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


def submit_in(db: sqlite3.Connection, new: NewRun, *, force: bool) -> tuple[str, Answer]:
    """`Store.submit` inside the caller's transaction."""
    if not force and (answer := answering(db, new.cache_key)) is not None:
        return answer
    return insert_new_run(db, new, status=RunStatus.QUEUED, worker=None), Answer.CREATED


def run_row(db: sqlite3.Connection, run_id: str) -> sqlite3.Row | None:
    return db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()


def run_status(db: sqlite3.Connection, run_id: str) -> RunStatus | None:
    """A run's status, None if there is no such run."""
    row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    return RunStatus(row["status"]) if row is not None else None


def run_exists(db: sqlite3.Connection, run_id: str) -> bool:
    return db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None


class RunsMixin(StoreBase):
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
            return insert_new_run(db, new, status=status, worker=worker)

    def answering_run(self, cache_key: str) -> tuple[str, Answer] | None:
        """(id, CACHED or EXISTING) of the run that answers `cache_key` now, or None."""
        with self.transaction() as db:
            return answering(db, cache_key)

    def submit(self, new: NewRun, *, force: bool = False) -> tuple[str, Answer]:
        """Queue `new` unless a run already answers its key (`force`: queue it anyway), in one transaction."""
        with self.transaction(immediate=True) as db:
            return submit_in(db, new, force=force)

    def get_run(self, run_id: str) -> RunRecord:
        with self.transaction() as db:
            row = run_row(db, run_id)
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
            where.append(f"runs.status IN ({placeholders(wanted)})")
            args += wanted
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY sweep_runs.position" if sweep_id is not None else " ORDER BY runs.created_at DESC"
        with self.transaction() as db:
            return [RunRecord.from_row(r) for r in db.execute(query + " LIMIT ?", (*args, limit))]

    def set_plan(self, run_id: str, *, plan: dict[str, Any], total_steps: int) -> None:
        with self.transaction(immediate=True) as db:
            db.execute(
                "UPDATE runs SET plan_json = ?, total_steps = ? WHERE id = ?", (json.dumps(plan), total_steps, run_id)
            )

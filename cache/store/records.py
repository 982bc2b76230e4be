"""What the store holds, as immutable values: a run's status, the run itself, its status history,
sweeps and workers. JSON columns are decoded here; nothing else parses them."""

import json
import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (RunStatus.QUEUED, RunStatus.RUNNING)


TERMINAL = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)  # a run's status once it has ended
WORKER_LOST = "worker lost"  # the prefix of every lost-worker error message


class Answer(StrEnum):
    """How a submission was answered: a new run, a finished identical run (a cache hit), or an identical
    run already queued or running."""

    CREATED = "created"
    CACHED = "cached"
    EXISTING = "existing"


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
    attempts: int = 0
    requeues_left: int = 0
    imported: bool = False
    stack_id: str | None = None  # runs sharing it were submitted to train together as one stack
    # each earlier attempt of a restarted run, oldest first: {"steps": its last stored step, "released": whether it
    # stored anything (then its releases are charged to the next attempt), "reason": why it went back to the queue}
    earlier_attempts: tuple[dict[str, Any], ...] = ()

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
            attempts=row["attempts"],
            requeues_left=row["requeues_left"],
            imported=bool(row["imported"]),
            stack_id=row["stack_id"],
            earlier_attempts=tuple(json.loads(row["earlier_attempts_json"] or "[]")),
        )

    def summary(self) -> dict[str, Any]:
        """The machine-readable line of `runs --json`."""
        return {
            "id": self.id,
            "status": self.status.value,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "worker": self.worker,
            "progress_step": self.progress_step,
            "total_steps": self.total_steps,
            "attempts": self.attempts,
            "earlier_attempts": list(self.earlier_attempts),
            "stack_id": self.stack_id,
            "engine_version": self.engine_version,
            "imported": self.imported,
            "error": self.error,
            "spec": self.spec,
            "result": self.result,
        }


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    """One entry of a run's status history."""

    run_id: str
    seq: int
    at: float
    status: RunStatus
    worker: str | None
    detail: str | None


@dataclass(frozen=True, kw_only=True)
class SweepRecord:
    id: str
    name: str | None
    spec: dict[str, Any]
    created_at: float
    run_ids: tuple[str, ...]  # in grid order
    points: tuple[dict[str, Any], ...]  # the grid point (parameter values and seed) of each run


@dataclass(frozen=True, kw_only=True)
class WorkerRecord:
    name: str
    backend: str
    host: str
    pid: int
    device: str | None
    started_at: float
    heartbeat_at: float
    current_run: str | None
    stopped_at: float | None
    stop_reason: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "WorkerRecord":
        return cls(**{key: row[key] for key in row.keys()})  # noqa: SIM118 (a Row iterates values)

    def alive(self, *, now: float, stale_after_s: float) -> bool:
        return self.stopped_at is None and now - self.heartbeat_at <= stale_after_s

"""Sweeps (`sweeps`, `sweep_runs`): a grid of runs submitted together, each member at its grid position."""

import json
import sqlite3
import time
import uuid
from collections.abc import Sequence
from typing import Any

from cache.store.connection import StoreError
from cache.store.records import Answer, SweepRecord
from cache.store.runs import NewRun, RunsMixin, run_exists, submit_in


def insert_sweep(
    db: sqlite3.Connection, sweep_id: str, *, name: str | None, spec: dict[str, Any], created_at: float
) -> None:
    db.execute(
        "INSERT INTO sweeps (id, name, spec_json, created_at) VALUES (?, ?, ?, ?)",
        (sweep_id, name, json.dumps(spec, sort_keys=True), created_at),
    )


def sweep_row(db: sqlite3.Connection, sweep_id: str) -> sqlite3.Row:
    """A sweep's row (`StoreError` if there is none)."""
    row = db.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
    if row is None:
        raise StoreError(f"no sweep with id {sweep_id!r}")
    return row


class SweepsMixin(RunsMixin):
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
            insert_sweep(db, sweep_id, name=name, spec=spec, created_at=time.time())
            for position, (point, member) in enumerate(members):
                if isinstance(member, str):
                    if not run_exists(db, member):
                        raise StoreError(f"no run with id {member!r:.80}")
                    run_id, answer = member, Answer.EXISTING
                else:
                    run_id, answer = submit_in(db, member, force=force)
                db.execute(
                    "INSERT INTO sweep_runs (sweep_id, run_id, position, point_json) VALUES (?, ?, ?, ?)",
                    (sweep_id, run_id, position, json.dumps(point, sort_keys=True)),
                )
                answers.append((run_id, answer))
        return sweep_id, answers

    def get_sweep(self, sweep_id: str) -> SweepRecord:
        with self.transaction() as db:
            row = sweep_row(db, sweep_id)
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

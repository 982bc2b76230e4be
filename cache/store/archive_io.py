"""The store side of moving runs between stores: the rows an export reads (`archive_runs`) and an import
inserts (`insert_runs`). Every multi-row change is one transaction: it happens entirely or not at all."""

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from cache.archive.format import Archive, ArchivedRun, ArchivedSweep, MetricRow, SweepMember
from cache.store.connection import StoreBase, StoreError
from cache.store.metrics import every_metric, insert_metrics
from cache.store.records import TERMINAL, RunRecord
from cache.store.runs import insert_run_row, run_row
from cache.store.status_history import insert_events, read_events
from cache.store.sweeps import insert_sweep, sweep_row


@dataclass(frozen=True, kw_only=True)
class Insertion:
    """What `insert_runs` did: the runs added, those skipped (id, reason), the sweeps touched."""

    imported: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    metric_rows: int
    sweeps_added: tuple[str, ...]
    sweep_members_added: int


def archive_runs(
    store: StoreBase,
    run_ids: Iterable[str] | None,
    sweep_ids: Iterable[str] = (),
    *,
    engine_version: str,
    include_metrics: bool = True,
) -> tuple[Archive, list[tuple[str, str]]]:
    """The archive of `run_ids` (None: every run) and the members of `sweep_ids`, read in one
    transaction, and the runs left out with the reason (queued and running runs are not archived).
    The sweeps keep only their archived members. An unknown id raises `StoreError`."""
    with store.transaction() as db:
        sweeps = [archived_sweep(db, s) for s in dict.fromkeys(sweep_ids)]
        if run_ids is None:
            ids = [r["id"] for r in db.execute("SELECT id FROM runs ORDER BY created_at, id")]
            sweeps = [archived_sweep(db, r["id"]) for r in db.execute("SELECT id FROM sweeps ORDER BY created_at, id")]
        else:
            ids = list(dict.fromkeys([*run_ids, *(m.run_id for s in sweeps for m in s.members)]))
        runs, left_out, metrics = [], [], {}
        for run_id in ids:
            row = run_row(db, run_id)
            if row is None:
                raise StoreError(f"no run with id {run_id!r}")
            record = RunRecord.from_row(row)
            if record.status.active:
                left_out.append(
                    (run_id, f"{record.status.value}: only finished, failed and cancelled runs are exported")
                )
                continue
            named = db.execute("SELECT name FROM run_names WHERE run_id = ?", (run_id,)).fetchone()
            runs.append(ArchivedRun.from_record(record, read_events(db, run_id), name=named[0] if named else None))
            if include_metrics:
                metrics[run_id] = every_metric(db, run_id)
    kept = {r.id for r in runs}
    sweeps = [replace(s, members=tuple(m for m in s.members if m.run_id in kept)) for s in sweeps]
    archive = Archive(
        engine_version=engine_version,
        runs=tuple(runs),
        metrics=metrics,
        sweeps=tuple(s for s in sweeps if s.members),
        includes_metrics=include_metrics,
    )
    return archive, left_out


def archived_sweep(db: sqlite3.Connection, sweep_id: str) -> ArchivedSweep:
    """A sweep as it travels, with every member it has in this store."""
    row = sweep_row(db, sweep_id)
    members = db.execute("SELECT * FROM sweep_runs WHERE sweep_id = ? ORDER BY position", (sweep_id,)).fetchall()
    return ArchivedSweep(
        id=row["id"],
        name=row["name"],
        spec=json.loads(row["spec_json"]),
        created_at=row["created_at"],
        members=tuple(
            SweepMember(position=m["position"], run_id=m["run_id"], point=json.loads(m["point_json"])) for m in members
        ),
    )


MetricSource = Mapping[str, Iterable[MetricRow]] | Callable[[str], Iterable[MetricRow]]


def insert_runs(
    store: StoreBase,
    runs: Iterable[ArchivedRun],
    metrics: MetricSource | None = None,
    sweeps: Iterable[ArchivedSweep] = (),
) -> Insertion:
    """Add archived runs (marked imported) with their status history and metrics, and their sweeps,
    in ONE transaction: all land or, on any error (raised by the store or by the streams it reads), nothing
    changes. `runs` and `sweeps` may be streams, read once, in order; `metrics` gives a run's rows (a
    mapping, or a function of the run id), read only for runs that are inserted. A run whose id is already
    in the store is skipped, never overwritten; a sweep already in the store gains only the new members
    whose position is free. The caller decides each run's cache key."""
    rows_of = (lambda run_id: metrics.get(run_id, ())) if isinstance(metrics, Mapping) else metrics
    imported, skipped, rows_added, sweeps_added, members_added = [], [], 0, [], 0
    seen: set[str] = set()
    taken: set[str] = set()  # ids that name another run in this store: never made a sweep member
    with store.transaction(immediate=True) as db:
        for run in runs:
            if run.id in seen:
                raise StoreError("the runs to insert repeat an id")
            seen.add(run.id)
            if run.status not in TERMINAL:
                raise StoreError(f"run {run.id}: only finished, failed and cancelled runs can be imported")
            existing = db.execute("SELECT spec_json FROM runs WHERE id = ?", (run.id,)).fetchone()
            if existing is not None:
                if json.loads(existing["spec_json"]) == run.spec:
                    skipped.append((run.id, "already in the store"))
                else:
                    skipped.append((run.id, "id taken by a different run in this store; not overwritten"))
                    taken.add(run.id)
                continue
            insert_archived_run(db, run)
            if rows_of is not None:
                rows_added += insert_metrics(db, run.id, rows_of(run.id))
            imported.append(run.id)
        for sweep in sweeps:
            if db.execute("SELECT 1 FROM sweeps WHERE id = ?", (sweep.id,)).fetchone() is None:
                insert_sweep(db, sweep.id, name=sweep.name, spec=sweep.spec, created_at=sweep.created_at)
                sweeps_added.append(sweep.id)
            for m in sweep.members:
                if m.run_id in taken:
                    continue
                members_added += db.execute(
                    "INSERT OR IGNORE INTO sweep_runs (sweep_id, run_id, position, point_json) SELECT ?, ?, ?, ?"
                    " WHERE NOT EXISTS (SELECT 1 FROM sweep_runs WHERE sweep_id = ? AND run_id = ?)",
                    (sweep.id, m.run_id, m.position, json.dumps(m.point, sort_keys=True), sweep.id, m.run_id),
                ).rowcount
            new = sweep.id in sweeps_added
            if new and db.execute("SELECT 1 FROM sweep_runs WHERE sweep_id = ?", (sweep.id,)).fetchone() is None:
                db.execute("DELETE FROM sweeps WHERE id = ?", (sweep.id,))  # every member was someone else's id
                sweeps_added.remove(sweep.id)
    return Insertion(
        imported=tuple(imported),
        skipped=tuple(skipped),
        metric_rows=rows_added,
        sweeps_added=tuple(sweeps_added),
        sweep_members_added=members_added,
    )


def insert_archived_run(db: sqlite3.Connection, run: ArchivedRun) -> None:
    """An archived run, marked imported, with its status history and the name its user gave it."""
    insert_run_row(
        db,
        run_id=run.id,
        cache_key=run.cache_key,
        spec=run.spec,
        engine_version=run.engine_version,
        status=run.status,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        total_steps=run.total_steps,
        progress_step=run.progress_step,
        plan=run.plan,
        result=run.result,
        error=run.error,
        attempts=run.attempts,
        imported=True,
    )
    insert_events(db, run.id, run.events)
    if run.name:
        db.execute("INSERT OR REPLACE INTO run_names (run_id, name) VALUES (?, ?)", (run.id, run.name))

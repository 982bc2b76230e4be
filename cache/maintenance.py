"""Keeping a store small and moving runs in and out of it: the size report, deletion, garbage
collection, compaction, and the store side of export (`archive_runs`) and import (`insert_runs`).

Deletion refuses queued and running runs (cancel them first, then delete): a worker may be writing
to them. Every multi-row change is one transaction: it happens entirely or not at all.
"""

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from cache.archive import TERMINAL, Archive, ArchivedRun, ArchivedSweep, MetricRow, SweepMember
from cache.records import RunEvent, RunRecord, RunStatus
from cache.store import Store, StoreError

LARGEST_RUNS = 10


@dataclass(frozen=True, kw_only=True)
class RunSize:
    run_id: str
    status: str
    metric_rows: int


@dataclass(frozen=True, kw_only=True)
class SizeReport:
    """How big a store is and what fills it."""

    path: str
    db_bytes: int
    wal_bytes: int
    shm_bytes: int
    page_size: int
    page_count: int
    free_pages: int
    runs_by_status: dict[str, int]
    runs_by_engine_version: dict[str, int]
    imported_runs: int
    metric_rows: int
    event_rows: int
    sweeps: int
    largest_runs: tuple[RunSize, ...]  # by metric rows, largest first
    datasets_bytes: int | None = None  # the datasets folder, when asked

    @property
    def file_bytes(self) -> int:
        return self.db_bytes + self.wal_bytes + self.shm_bytes

    @property
    def run_count(self) -> int:
        return sum(self.runs_by_status.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"file_bytes": self.file_bytes, "run_count": self.run_count}


@dataclass(frozen=True, kw_only=True)
class Compaction:
    bytes_before: int  # database, -wal and -shm files together
    bytes_after: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Insertion:
    """What `insert_runs` did: the runs added, those skipped (id, reason), the sweeps touched."""

    imported: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    metric_rows: int
    sweeps_added: tuple[str, ...]
    sweep_members_added: int


def _file_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def store_bytes(store: Store) -> int:
    """The database file with its -wal and -shm files."""
    return sum(_file_bytes(Path(f"{store.path}{suffix}")) for suffix in ("", "-wal", "-shm"))


def folder_bytes(path: Path | str) -> int:
    """Bytes of the regular files under `path` (links not followed); 0 when it does not exist."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            file = Path(root, name)
            if not file.is_symlink():
                total += _file_bytes(file)
    return total


def size_report(store: Store, *, datasets_dir: Path | str | None = None, largest: int = LARGEST_RUNS) -> SizeReport:
    with store.transaction() as db:

        def pragma(name: str) -> int:
            return db.execute(f"PRAGMA {name}").fetchone()[0]

        def grouped(column: str) -> dict[str, int]:
            query = f"SELECT {column}, COUNT(*) FROM runs GROUP BY {column} ORDER BY {column}"
            return {row[0]: row[1] for row in db.execute(query)}

        def count(query: str) -> int:
            return db.execute(query).fetchone()[0]

        top = db.execute(
            "SELECT m.run_id, r.status, m.n FROM (SELECT run_id, COUNT(*) AS n FROM metrics GROUP BY run_id) AS m"
            " JOIN runs AS r ON r.id = m.run_id ORDER BY m.n DESC, m.run_id LIMIT ?",
            (largest,),
        ).fetchall()
        numbers = dict(
            page_size=pragma("page_size"),
            page_count=pragma("page_count"),
            free_pages=pragma("freelist_count"),
            runs_by_status=grouped("status"),
            runs_by_engine_version=grouped("engine_version"),
            imported_runs=count("SELECT COUNT(*) FROM runs WHERE imported = 1"),
            metric_rows=count("SELECT COUNT(*) FROM metrics"),
            event_rows=count("SELECT COUNT(*) FROM run_events"),
            sweeps=count("SELECT COUNT(*) FROM sweeps"),
        )
    return SizeReport(
        path=str(store.path),
        db_bytes=_file_bytes(store.path),
        wal_bytes=_file_bytes(Path(f"{store.path}-wal")),
        shm_bytes=_file_bytes(Path(f"{store.path}-shm")),
        largest_runs=tuple(RunSize(run_id=r[0], status=r[1], metric_rows=r[2]) for r in top),
        datasets_bytes=folder_bytes(datasets_dir) if datasets_dir is not None else None,
        **numbers,
    )


# ---------------------------------------------------------------------------------------- deleting


def _statuses(db: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, RunStatus]:
    found = {}
    for run_id in run_ids:
        row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run with id {run_id!r}; nothing was deleted")
        found[run_id] = RunStatus(row["status"])
    active = [f"{i} ({s.value})" for i, s in found.items() if s.active]
    if active:
        raise StoreError(
            f"cannot delete {len(active)} active run(s): {', '.join(active)}; cancel them first "
            "(a worker may be writing to them). Nothing was deleted"
        )
    return found


def check_deletable(store: Store, run_ids: Iterable[str]) -> list[str]:
    """The distinct ids, in order, after checking each exists and is not queued or running
    (`StoreError` otherwise). For asking a confirmation before `delete_runs`."""
    ids = list(dict.fromkeys(run_ids))
    with store.transaction() as db:
        _statuses(db, ids)
    return ids


def delete_runs(store: Store, run_ids: Iterable[str]) -> int:
    """Delete terminal runs with their metrics, status history and sweep membership, in one
    transaction; a sweep left without members goes too. An unknown id or a queued or running run
    raises `StoreError` and nothing is deleted. Returns the number of runs deleted."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return 0
    params = [(i,) for i in ids]
    with store.transaction(immediate=True) as db:
        _statuses(db, ids)
        sweeps = {r[0] for p in params for r in db.execute("SELECT sweep_id FROM sweep_runs WHERE run_id = ?", p)}
        db.executemany("DELETE FROM metrics WHERE run_id = ?", params)
        db.executemany("DELETE FROM run_events WHERE run_id = ?", params)
        db.executemany("DELETE FROM sweep_runs WHERE run_id = ?", params)
        db.executemany("UPDATE workers SET current_run = NULL WHERE current_run = ?", params)
        db.executemany("DELETE FROM runs WHERE id = ?", params)
        db.executemany(
            "DELETE FROM sweeps WHERE id = ? AND NOT EXISTS (SELECT 1 FROM sweep_runs WHERE sweep_id = sweeps.id)",
            [(s,) for s in sweeps],
        )
    return len(ids)


def select_for_gc(
    store: Store,
    *,
    statuses: Iterable[RunStatus | str] = (RunStatus.FAILED, RunStatus.CANCELLED),
    older_than_s: float | None = None,
    other_engine_versions: bool = False,
    current_engine_version: str | None = None,
    now: float | None = None,
) -> list[str]:
    """Ids of the runs garbage collection would delete, oldest first: runs in `statuses`, and with
    `other_engine_versions` every terminal run made by another engine version than
    `current_engine_version` (no longer served from the cache); with `older_than_s`, only those
    that ended (or, never started, were created) longer ago than that. Never a queued or running run."""
    try:
        wanted = [RunStatus(s) for s in statuses]
    except ValueError as exc:
        raise StoreError(f"{exc}; statuses are {', '.join(s.value for s in TERMINAL)}") from None
    if any(s.active for s in wanted):
        raise StoreError("garbage collection never selects queued or running runs; cancel them first")
    if other_engine_versions and not current_engine_version:
        raise StoreError("other_engine_versions needs the current engine version")
    if older_than_s is not None and not older_than_s >= 0:
        raise StoreError(f"older_than_s must be a number >= 0, got {older_than_s}")
    terminal = [s.value for s in TERMINAL]
    query = "SELECT id FROM runs WHERE status IN ({}) AND (status IN ({})".format(
        ",".join("?" * len(terminal)), ",".join("?" * len(wanted)) or "NULL"
    )
    args: list[Any] = [*terminal, *(s.value for s in wanted)]
    if other_engine_versions:
        query += " OR engine_version != ?"
        args.append(current_engine_version)
    query += ")"
    if older_than_s is not None:
        query += " AND COALESCE(finished_at, created_at) < ?"
        args.append((time.time() if now is None else now) - older_than_s)
    with store.transaction() as db:
        return [row["id"] for row in db.execute(query + " ORDER BY created_at, id", args)]


def compact(store: Store) -> Compaction:
    """Give the space of deleted rows back to the file system: checkpoint the WAL into the database,
    VACUUM, and truncate the WAL. Waits for running writers (the busy timeout) like any write."""
    before = store_bytes(store)
    db = sqlite3.connect(store.path, timeout=30.0, isolation_level=None)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError as exc:
        raise StoreError(f"cannot compact {store.path} now ({exc}); try again when the workers are idle") from exc
    finally:
        db.close()
    return Compaction(bytes_before=before, bytes_after=store_bytes(store))


# ---------------------------------------------------------------------------------------- export and import


def archive_runs(
    store: Store,
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
        sweeps = [_sweep_rows(db, s) for s in dict.fromkeys(sweep_ids)]
        if run_ids is None:
            ids = [r["id"] for r in db.execute("SELECT id FROM runs ORDER BY created_at, id")]
            sweeps = [_sweep_rows(db, r["id"]) for r in db.execute("SELECT id FROM sweeps ORDER BY created_at, id")]
        else:
            ids = list(dict.fromkeys([*run_ids, *(m.run_id for s in sweeps for m in s.members)]))
        runs, left_out, metrics = [], [], {}
        for run_id in ids:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run with id {run_id!r}")
            record = RunRecord.from_row(row)
            if record.status.active:
                left_out.append(
                    (run_id, f"{record.status.value}: only finished, failed and cancelled runs are exported")
                )
                continue
            events = [
                _event(e) for e in db.execute("SELECT * FROM run_events WHERE run_id = ? ORDER BY seq", (run_id,))
            ]
            runs.append(ArchivedRun.from_record(record, events))
            if include_metrics:
                query = "SELECT step, name, value FROM metrics WHERE run_id = ? ORDER BY step, name"
                metrics[run_id] = [tuple(m) for m in db.execute(query, (run_id,))]
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


def _event(row: sqlite3.Row) -> RunEvent:
    return RunEvent(
        run_id=row["run_id"],
        seq=row["seq"],
        at=row["at"],
        status=RunStatus(row["status"]),
        worker=row["worker"],
        detail=row["detail"],
    )


def _sweep_rows(db: sqlite3.Connection, sweep_id: str) -> ArchivedSweep:
    row = db.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
    if row is None:
        raise StoreError(f"no sweep with id {sweep_id!r}")
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
METRIC_BATCH = 10_000  # rows per executemany: memory stays a batch, whatever a run holds


def insert_runs(
    store: Store,
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
            _insert_run(db, run)
            if rows_of is not None:
                rows_added += _insert_metrics(db, run.id, rows_of(run.id))
            imported.append(run.id)
        for sweep in sweeps:
            if db.execute("SELECT 1 FROM sweeps WHERE id = ?", (sweep.id,)).fetchone() is None:
                db.execute(
                    "INSERT INTO sweeps (id, name, spec_json, created_at) VALUES (?, ?, ?, ?)",
                    (sweep.id, sweep.name, json.dumps(sweep.spec, sort_keys=True), sweep.created_at),
                )
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


def _insert_metrics(db: sqlite3.Connection, run_id: str, rows: Iterable[MetricRow]) -> int:
    """Insert a run's metric rows in batches of `METRIC_BATCH`; returns how many."""
    count, batch = 0, []
    for step, name, value in rows:
        batch.append((run_id, step, name, value))
        if len(batch) >= METRIC_BATCH:
            db.executemany("INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)", batch)
            count, batch = count + len(batch), []
    db.executemany("INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)", batch)
    return count + len(batch)


def _insert_run(db: sqlite3.Connection, run: ArchivedRun) -> None:
    db.execute(
        "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at, started_at, finished_at,"
        " total_steps, progress_step, plan_json, result_json, error, attempts, imported)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
        (
            run.id,
            run.cache_key,
            json.dumps(run.spec, sort_keys=True),
            run.engine_version,
            run.status.value,
            run.created_at,
            run.started_at,
            run.finished_at,
            run.total_steps,
            run.progress_step,
            json.dumps(run.plan) if run.plan is not None else None,
            json.dumps(run.result) if run.result is not None else None,
            run.error,
            run.attempts,
        ),
    )
    db.executemany(
        "INSERT INTO run_events (run_id, seq, at, status, worker, detail) VALUES (?, ?, ?, ?, ?, ?)",
        [(run.id, e.seq, e.at, e.status.value, e.worker, e.detail) for e in run.events],
    )

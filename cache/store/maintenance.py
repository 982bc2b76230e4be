"""Keeping a store small and sound: the size report, deletion, garbage collection, compaction and the
integrity check.

Deletion refuses queued and running runs (cancel them first, then delete): a worker may be writing
to them. Every multi-row change is one transaction: it happens entirely or not at all.
"""

import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cache.store.connection import StoreBase, StoreError
from cache.store.metrics import delete_metrics
from cache.store.names import delete_names
from cache.store.records import TERMINAL, RunStatus
from cache.store.runs import run_status
from cache.store.status_history import delete_events
from cache.store.workers import release_runs

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


def _file_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def store_bytes(store: StoreBase) -> int:
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


def size_report(store: StoreBase, *, datasets_dir: Path | str | None = None, largest: int = LARGEST_RUNS) -> SizeReport:
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
        status = run_status(db, run_id)
        if status is None:
            raise StoreError(f"no run with id {run_id!r}; nothing was deleted")
        found[run_id] = status
    active = [f"{i} ({s.value})" for i, s in found.items() if s.active]
    if active:
        raise StoreError(
            f"cannot delete {len(active)} active run(s): {', '.join(active)}; cancel them first "
            "(a worker may be writing to them). Nothing was deleted"
        )
    return found


def check_deletable(store: StoreBase, run_ids: Iterable[str]) -> list[str]:
    """The distinct ids, in order, after checking each exists and is not queued or running
    (`StoreError` otherwise). For asking a confirmation before `delete_runs`."""
    ids = list(dict.fromkeys(run_ids))
    with store.transaction() as db:
        _statuses(db, ids)
    return ids


def delete_runs(store: StoreBase, run_ids: Iterable[str]) -> int:
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
        delete_metrics(db, ids)
        delete_events(db, ids)
        delete_names(db, ids)
        db.executemany("DELETE FROM sweep_runs WHERE run_id = ?", params)
        release_runs(db, ids)
        db.executemany("DELETE FROM runs WHERE id = ?", params)
        db.executemany(
            "DELETE FROM sweeps WHERE id = ? AND NOT EXISTS (SELECT 1 FROM sweep_runs WHERE sweep_id = sweeps.id)",
            [(s,) for s in sweeps],
        )
    return len(ids)


def select_for_gc(
    store: StoreBase,
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


def compact(store: StoreBase) -> Compaction:
    """Give the space of deleted rows back to the file system: checkpoint the WAL into the database,
    VACUUM, and truncate the WAL. Waits for running writers (the busy timeout) like any write."""
    before = store_bytes(store)
    with store.connect() as db:
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise  # a full disk (VACUUM needs room for a copy), a read-only or damaged file: named by `connect`
            raise StoreError(f"cannot compact {store.path} now ({exc}); try again when the workers are idle") from exc
    return Compaction(bytes_before=before, bytes_after=store_bytes(store))


class MaintenanceMixin(StoreBase):
    def integrity_ok(self) -> bool:
        with self.transaction() as db:
            return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

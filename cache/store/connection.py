"""The store's plumbing: a short-lived connection per transaction, the wait for the write lock, and the
schema migrated on open (`cache.store.schema`). Every connection passes through `connect` and every failure
of the file itself (damaged, not a store, read-only, disk full) leaves it as a named `StoreError`
(`cache.store.errors`)."""

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from cache.store.errors import (
    StoreError,
    check_store_file,
    failure,
    not_a_store,
    too_new,
)
from cache.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "StoreBase",
    "StoreError",
    "placeholders",
]

BUSY_TIMEOUT_S = 30.0  # how long a transaction waits for the write lock before retrying
LOCK_RETRY_DEADLINE_S = 300.0  # total time before "database is locked" is let through


def placeholders(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class StoreBase:
    """A store file: checked, opened in WAL mode and migrated to this code's schema at construction."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        with self.named_failures():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        check_store_file(self.path)
        with self.connect() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise too_new(self.path, version, SCHEMA_VERSION)
            if version == 0 and db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None:
                raise not_a_store(self.path, "an SQLite database of another program, not a store")
            db.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the database file
        with self.transaction(immediate=True) as db:
            self._migrate(db)

    @contextmanager
    def named_failures(self) -> Iterator[None]:
        """Failures of the store file (SQLite's or the system's) raised as their named `StoreError`."""
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            named = failure(self.path, exc)
            if named is None:
                raise
            raise named from exc

    @contextmanager
    def connect(self, *, timeout: float = BUSY_TIMEOUT_S) -> Iterator[sqlite3.Connection]:
        """A connection in autocommit mode, closed after; failures of the file named."""
        with self.named_failures():
            db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            try:
                yield db
            finally:
                db.close()

    @contextmanager
    def transaction(self, *, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction on a fresh connection. `immediate` takes the write lock up front (every
        write does: a read transaction upgraded to a write can fail without waiting). Any error rolls it
        back: it happens entirely or not at all."""
        with self.connect() as db:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")
            self._begin(db, "BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back already (a full disk, a damaged page)
                    with suppress(sqlite3.Error):  # closing the connection rolls back too
                        db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

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
            raise too_new(self.path, version, SCHEMA_VERSION)
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={number + 1}")

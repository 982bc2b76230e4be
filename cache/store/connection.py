"""The store's plumbing: a short-lived connection per transaction, the wait for the write lock, and the
schema migrated on open (`cache.store.schema`)."""

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cache.store.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_S = 30.0  # how long a transaction waits for the write lock before retrying
LOCK_RETRY_DEADLINE_S = 300.0  # total time before "database is locked" is let through


class StoreError(RuntimeError):
    """The store cannot do what was asked (unknown run, newer schema, ...)."""


def placeholders(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class StoreBase:
    """A store file: opened in WAL mode and migrated to this code's schema at construction."""

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

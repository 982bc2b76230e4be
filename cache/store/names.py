"""The names users give their runs (`run_names`): kept beside the run records, never part of a run's spec,
result or cache key (a name changes nothing a run computed); a run's name travels with it in an export."""

import sqlite3
from collections.abc import Iterable

from cache.store.connection import StoreBase, StoreError

MAX_NAME_CHARS = 80


def delete_names(db: sqlite3.Connection, run_ids: Iterable[str]) -> None:
    db.executemany("DELETE FROM run_names WHERE run_id = ?", [(i,) for i in run_ids])


class NamesMixin(StoreBase):
    def set_run_name(self, run_id: str, name: str) -> str:
        """Name a run (surrounding space dropped; an empty name removes it); returns the name kept. StoreError
        for an unknown run or a name over `MAX_NAME_CHARS` characters."""
        name = name.strip()
        if len(name) > MAX_NAME_CHARS:
            raise StoreError(f"name: at most {MAX_NAME_CHARS} characters, got {len(name)}")
        with self.transaction(immediate=True) as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"no run {run_id!r}")
            if name:
                db.execute("INSERT OR REPLACE INTO run_names (run_id, name) VALUES (?, ?)", (run_id, name))
            else:
                delete_names(db, [run_id])
        return name

    def run_names(self) -> dict[str, str]:
        """Every name given to a run, by run id."""
        with self.transaction() as db:
            return {row[0]: row[1] for row in db.execute("SELECT run_id, name FROM run_names")}

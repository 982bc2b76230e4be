"""The names users give their runs: kept beside the records, replaced, cleared, bounded, gone with the run."""

import sqlite3
from contextlib import closing

import pytest

from cache import Store, StoreError
from cache.store.maintenance import delete_runs
from cache.store.names import MAX_NAME_CHARS
from cache.store.schema import MIGRATIONS
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests.helpers import fast_spec

NAMES_MIGRATION = next(m for m in MIGRATIONS if "CREATE TABLE run_names" in m)


def test_a_run_is_named_renamed_and_unnamed_and_nothing_it_computed_changes(store: Store):
    run_id = submit(store, parse_spec(fast_spec())).run_id
    before = store.get_run(run_id)
    assert store.run_names() == {}
    assert store.set_run_name(run_id, "  the baseline  ") == "the baseline"
    assert store.run_names() == {run_id: "the baseline"}
    store.set_run_name(run_id, "ε 3, lots of 64")
    assert store.run_names() == {run_id: "ε 3, lots of 64"}
    assert store.get_run(run_id) == before  # spec, cache key and result untouched
    assert store.set_run_name(run_id, "   ") == ""
    assert store.run_names() == {}


def test_a_name_is_bounded_and_needs_a_run(store: Store):
    run_id = submit(store, parse_spec(fast_spec())).run_id
    with pytest.raises(StoreError, match=f"at most {MAX_NAME_CHARS} characters"):
        store.set_run_name(run_id, "x" * (MAX_NAME_CHARS + 1))
    with pytest.raises(StoreError, match="no run"):
        store.set_run_name("nope", "a name")
    assert store.run_names() == {}


def test_a_deleted_run_takes_its_name_with_it(store: Store):
    run_id = submit(store, parse_spec(fast_spec())).run_id
    store.set_run_name(run_id, "short-lived")
    store.request_cancel(run_id)  # a queued run is cancelled at once: terminal, so it can be deleted
    assert delete_runs(store, [run_id]) == 1
    assert store.run_names() == {}


def test_a_store_of_the_previous_schema_gains_the_names_table(tmp_path):
    path = tmp_path / "runs.sqlite3"
    Store(path)
    with closing(sqlite3.connect(path)) as db:
        db.execute("DROP TABLE run_names")
        db.execute("ALTER TABLE runs DROP COLUMN earlier_attempts_json")  # the migration after the names table
        db.execute(f"PRAGMA user_version={MIGRATIONS.index(NAMES_MIGRATION)}")
        db.commit()
    reopened = Store(path)
    run_id = submit(reopened, parse_spec(fast_spec())).run_id
    reopened.set_run_name(run_id, "after the migration")
    assert reopened.run_names() == {run_id: "after the migration"}

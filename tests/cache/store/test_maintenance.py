"""Keeping a store small: size report, deletion, garbage collection, compaction, atomic inserts, and
the `delete`, `gc` and `size` commands."""

import io
import json
import sqlite3
import sys
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from cache import RunStatus, Store, StoreError
from cache.archive.format import ArchivedRun
from cache.store.archive_io import insert_runs
from cache.store.maintenance import (
    check_deletable,
    compact,
    delete_runs,
    select_for_gc,
    size_report,
    store_bytes,
)
from engine import ENGINE_VERSION
from engine.cli import main
from engine.training import parse_spec
from tests.helpers import fast_spec

# ---------------------------------------------------------------------------------------- helpers (shared)


def result_for(steps: int, *, stopped_early: bool = False) -> dict:
    """A plausible result dict of a DP-SGD run (an infinite ε from a composition theorem included)."""
    return {
        "algorithm": "dpsgd",
        "private": True,
        "test_accuracy": 0.91,
        "test_loss": 0.3,
        "epsilon": 2.5,
        "delta": 1e-5,
        "noise_multiplier": 1.1,
        "sampling_rate": 0.0445,
        "steps": steps,
        "planned_steps": steps,
        "accountant": "pld",
        "epsilons": {"rdp": 2.9, "pld": 2.5, "naive": float("inf")},
        "best_order": 5.0,
        "order_at_edge": False,
        "privacy_statement": "(2.5, 1e-05)-DP.",
        "stopped_early": stopped_early,
        "seconds": 1.5,
        "device": "cpu",
    }


def make_run(
    store: Store,
    status: RunStatus = RunStatus.FINISHED,
    *,
    steps: int = 5,
    engine_version: str = ENGINE_VERSION,
    **spec_overrides,
) -> str:
    """A run created and ended directly in the store, with per-step metrics (no training)."""
    spec = parse_spec(fast_spec(**spec_overrides))
    running = status is not RunStatus.QUEUED
    run_id = store.create_run(
        spec=spec.to_dict(),
        cache_key=spec.cache_key(engine_version),
        engine_version=engine_version,
        status=RunStatus.RUNNING if running else RunStatus.QUEUED,
        worker="test-worker" if running else None,
    )
    if not running:
        return run_id
    store.set_plan(run_id, plan={"steps": steps, "noise_multiplier": 1.1, "delta": 1e-5}, total_steps=steps)
    rows = [
        (t, {"epsilon": 0.1 * t, "test_accuracy": 0.5 + t / 100, "train_loss": 2.0 / (t + 1)}) for t in range(steps + 1)
    ]
    store.append_metrics(run_id, rows)
    if status is RunStatus.FINISHED:
        store.finish(run_id, status=status, result=result_for(steps))
    elif status is RunStatus.CANCELLED:
        store.finish(run_id, status=status, result=result_for(steps, stopped_early=True))
    elif status is RunStatus.FAILED:
        store.finish(run_id, status=status, error="ValueError: boom")
    return run_id


def dump(store: Store) -> list[str]:
    """Every table's rows (and the schema), to show a store unchanged."""
    with closing(sqlite3.connect(store.path)) as db:
        return list(db.iterdump())


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, _ = run_cli(capsys, *args, "--json")
    return code, json.loads(out.strip().splitlines()[-1])


def set_finished_at(store: Store, run_id: str, when: float) -> None:
    with store.transaction(immediate=True) as db:
        db.execute("UPDATE runs SET finished_at = ? WHERE id = ?", (when, run_id))


# ---------------------------------------------------------------------------------------- size report


def test_size_report_counts_match_the_store(store, tmp_path):
    finished = make_run(store, steps=9)
    make_run(store, RunStatus.FAILED, steps=2, seed=1)
    make_run(store, RunStatus.QUEUED, seed=2)
    (tmp_path / "datasets" / "x").mkdir(parents=True)
    (tmp_path / "datasets" / "x" / "a.bin").write_bytes(b"\0" * 1000)
    report = size_report(store, datasets_dir=tmp_path / "datasets")
    assert report.runs_by_status == {"finished": 1, "failed": 1, "queued": 1} and report.run_count == 3
    assert report.runs_by_engine_version == {ENGINE_VERSION: 3} and report.imported_runs == 0
    assert report.metric_rows == 3 * 10 + 3 * 3 == len(store.metrics(finished)) + 9
    assert report.largest_runs[0].run_id == finished and report.largest_runs[0].metric_rows == 30
    assert [r.metric_rows for r in report.largest_runs] == [30, 9]
    assert report.event_rows == 3 + 3 + 1 and report.sweeps == 0
    assert report.db_bytes == Path(store.path).stat().st_size and report.file_bytes == store_bytes(store)
    assert report.page_count * report.page_size >= report.db_bytes > 0 and report.free_pages >= 0
    assert report.datasets_bytes == 1000
    assert json.loads(json.dumps(report.to_dict()))["file_bytes"] == report.file_bytes
    assert size_report(store).datasets_bytes is None


# ---------------------------------------------------------------------------------------- deletion


def test_delete_cascades_to_metrics_history_and_sweeps_in_one_go(store):
    keep, gone, other = make_run(store), make_run(store, seed=1), make_run(store, RunStatus.FAILED, seed=2)
    sweep_id, _ = store.create_sweep(spec={"grid": {}}, name="s", members=[({"seed": 0}, keep), ({"seed": 1}, gone)])
    only_gone, _ = store.create_sweep(spec={"grid": {}}, name="t", members=[({"seed": 1}, gone)])
    empty, _ = store.create_sweep(spec={"grid": {}}, name="empty", members=[])
    assert delete_runs(store, [gone, other, gone]) == 2
    ids = {r.id for r in store.list_runs()}
    assert ids == {keep} and store.metrics(gone) == [] and store.events(gone) == []
    assert store.get_sweep(sweep_id).run_ids == (keep,)
    with pytest.raises(StoreError, match="no sweep"):
        store.get_sweep(only_gone)  # left without members: removed
    assert store.get_sweep(empty).run_ids == ()  # empty before: not this deletion's business
    assert len(store.metrics(keep)) == 18 and store.integrity_ok()
    with closing(sqlite3.connect(store.path)) as db:
        assert db.execute("SELECT COUNT(*) FROM run_events WHERE run_id != ?", (keep,)).fetchone()[0] == 0
    assert delete_runs(store, []) == 0


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RUNNING])
def test_delete_refuses_active_runs_and_deletes_nothing(store, status):
    done = make_run(store)
    active = make_run(store, RunStatus.QUEUED, seed=1)
    if status is RunStatus.RUNNING:
        store.claim_next("w")
    before = dump(store)
    with pytest.raises(StoreError, match=rf"cannot delete 1 active run\(s\): {active} \({status.value}\); cancel"):
        delete_runs(store, [done, active])
    with pytest.raises(StoreError, match="no run with id 'nope'"):
        delete_runs(store, [done, "nope"])
    with pytest.raises(StoreError, match="active"):
        check_deletable(store, [active])
    assert dump(store) == before
    assert store.request_cancel(active) in (RunStatus.CANCELLED, RunStatus.RUNNING)
    if status is RunStatus.RUNNING:
        store.finish(active, status=RunStatus.CANCELLED, result=result_for(1, stopped_early=True))
    assert delete_runs(store, [done, active]) == 2 and store.list_runs() == []


# ---------------------------------------------------------------------------------------- gc and compaction


def test_select_for_gc_by_status_age_and_engine_version(store):
    finished, failed = make_run(store), make_run(store, RunStatus.FAILED, seed=1)
    cancelled = make_run(store, RunStatus.CANCELLED, seed=2)
    old = make_run(store, engine_version="0.0.1", seed=3)
    queued = make_run(store, RunStatus.QUEUED, seed=4)
    assert select_for_gc(store) == [failed, cancelled]
    assert select_for_gc(store, statuses=["finished"]) == [finished, old]
    assert select_for_gc(store, other_engine_versions=True, current_engine_version=ENGINE_VERSION) == [
        failed,
        cancelled,
        old,
    ]
    set_finished_at(store, failed, time.time() - 10 * 86_400)
    assert select_for_gc(store, older_than_s=86_400) == [failed]
    assert queued not in select_for_gc(store, statuses=(), other_engine_versions=True, current_engine_version="9")
    for bad in (
        {"statuses": ["queued"]},
        {"statuses": ["bogus"]},
        {"other_engine_versions": True},
        {"older_than_s": -1.0},
    ):
        with pytest.raises(StoreError):
            select_for_gc(store, **bad)


def test_compact_gives_space_back_and_keeps_the_data(store):
    ids = [make_run(store, steps=400, seed=s) for s in range(6)]
    keep = make_run(store, RunStatus.FAILED, seed=99)
    delete_runs(store, ids)
    report = compact(store)
    assert report.bytes_after < report.bytes_before and report.bytes_after == store_bytes(store)
    wal = Path(f"{store.path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert [r.id for r in store.list_runs()] == [keep] and store.integrity_ok()
    assert size_report(store).free_pages == 0


# ---------------------------------------------------------------------------------------- atomic inserts


def archived(store: Store, run_id: str) -> ArchivedRun:
    return ArchivedRun.from_record(store.get_run(run_id), store.events(run_id))


def test_insert_runs_is_all_or_nothing_and_never_overwrites(store, tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    first, second = make_run(source), make_run(source, seed=1)
    runs = [archived(source, first), archived(source, second)]
    metrics = {first: source.metrics(first), second: [*source.metrics(second), (0, "epsilon", 1.0)]}  # a duplicate row
    before = dump(store)
    with pytest.raises(sqlite3.IntegrityError):
        insert_runs(store, runs, metrics)
    assert dump(store) == before
    with pytest.raises(StoreError, match="repeat"):
        insert_runs(store, [runs[0], runs[0]])
    done = insert_runs(store, runs, {first: source.metrics(first)})
    assert done.imported == (first, second) and done.skipped == () and done.metric_rows == 18
    assert store.get_run(first).imported and store.metrics(first) == source.metrics(first)
    again = insert_runs(store, runs)
    assert again.imported == () and again.skipped == ((first, "already in the store"), (second, "already in the store"))
    clash = insert_runs(store, [replace(runs[0], spec={"other": 1})])
    assert clash.skipped == ((first, "id taken by a different run in this store; not overwritten"),)
    assert store.get_run(first).spec == source.get_run(first).spec


# ---------------------------------------------------------------------------------------- the commands


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_delete_command_refuses_without_yes_and_asks_on_a_terminal(store, capsys, monkeypatch):
    run_id = make_run(store)
    before = dump(store)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out = cli_json(capsys, "delete", run_id)
    assert code == 2 and "pass --yes" in out["error"] and dump(store) == before
    monkeypatch.setattr(sys, "stdin", FakeTTY("n\n"))
    code, out, err = run_cli(capsys, "delete", run_id)
    assert code == 0 and "Delete 1 run(s)" in err and "nothing deleted" in out and dump(store) == before
    monkeypatch.setattr(sys, "stdin", FakeTTY("y\n"))
    code, out = cli_json(capsys, "delete", run_id)
    assert code == 0 and out == {"deleted": 1, "runs": [run_id], "confirmed": True} and store.list_runs() == []


def test_delete_command_errors(store, capsys):
    queued = make_run(store, RunStatus.QUEUED)
    before = dump(store)
    code, out = cli_json(capsys, "delete", queued, "--yes")
    assert code == 2 and "active" in out["error"] and dump(store) == before
    code, out = cli_json(capsys, "delete", "nope", "--yes")
    assert code == 2 and "no run with id 'nope'" in out["error"]
    code, _, err = run_cli(capsys, "delete")
    assert code == 2 and "RUN" in err
    done = make_run(store, seed=1)
    code, out, _ = run_cli(capsys, "delete", done, "--yes")
    assert code == 0 and f"deleted 1 run(s) with their metrics and history: {done}" in out


def test_gc_command_lists_by_default_and_deletes_with_yes(store, capsys):
    keep, failed = make_run(store), make_run(store, RunStatus.FAILED, seed=1)
    cancelled = make_run(store, RunStatus.CANCELLED, seed=2)
    before = dump(store)
    code, out = cli_json(capsys, "gc")
    assert code == 0 and out["dry_run"] and out["candidates"] == [failed, cancelled] and out["deleted"] == 0
    assert "reaping is not gc's job" in out["note"] and dump(store) == before
    code, text, _ = run_cli(capsys, "gc", "--status", "failed")
    assert code == 0 and f"would delete 1 run(s): {failed}; pass --yes" in text and dump(store) == before
    code, out = cli_json(capsys, "gc", "--older-than", "-1")
    assert code == 2 and "--older-than" in out["error"]
    code, out = cli_json(capsys, "gc", "--status", "running")
    assert code == 2 and "invalid choice" in out["error"]
    code, out = cli_json(capsys, "gc", "--yes")
    assert code == 0 and not out["dry_run"] and out["deleted"] == 2
    assert out["compaction"]["bytes_after"] == store_bytes(store)
    assert [r.id for r in store.list_runs()] == [keep]
    code, text, _ = run_cli(capsys, "gc", "--yes", "--status", "finished", "--older-than", "1")
    assert code == 0 and "deleted 0 run(s)" in text and [r.id for r in store.list_runs()] == [keep]


def test_size_command_reports_the_store(store, capsys, home):
    make_run(store, steps=3)
    make_run(store, RunStatus.FAILED, seed=1, steps=1)
    code, out = cli_json(capsys, "size")
    expected = size_report(store, datasets_dir=home / "datasets").to_dict()
    assert code == 0 and out["runs_by_status"] == {"finished": 1, "failed": 1} and out["metric_rows"] == 12 + 6
    for key in ("runs_by_status", "metric_rows", "event_rows", "sweeps", "page_count", "db_bytes", "imported_runs"):
        assert out[key] == expected[key], key
    assert out["largest_runs"][0]["metric_rows"] == 12
    code, text, _ = run_cli(capsys, "size")
    assert code == 0 and "runs: 2 (failed 1, finished 1)" in text and "metric rows: 18" in text

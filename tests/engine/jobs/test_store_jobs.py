"""Store, queue and worker: submit → worker → store → finished, the cache, failures, cancel."""

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from cache import LostRun, RunStatus, Store, StoreError
from cache.store.schema import SCHEMA_VERSION
from engine.jobs.options import split_job_options
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.training import SpecError, parse_spec
from tests.helpers import ROOT, fast_spec, home_env


def quick_spec(**overrides):
    return parse_spec(fast_spec(epochs=2, **overrides))


def test_submit_worker_store_finished_with_metrics(store):
    submission = submit(store, quick_spec())
    assert not submission.cached and store.get_run(submission.run_id).status is RunStatus.QUEUED
    run = Worker(store, data_dirs=[]).run_one()
    assert run.id == submission.run_id and run.status is RunStatus.FINISHED
    assert run.result["epsilon"] <= 3.0 and run.result["steps"] == run.total_steps == 45
    assert run.plan["noise_multiplier"] == run.result["noise_multiplier"]
    rows = store.metrics(run.id)
    steps = sorted({step for step, _, _ in rows})
    assert steps == list(range(46)) and run.progress_step == 45
    epsilons = [value for _, name, value in rows if name == "epsilon"]
    assert epsilons[-1] == pytest.approx(run.result["epsilons"]["rdp"])  # the live curve is RDP, per step
    assert run.result["epsilon"] == min(run.result["epsilons"].values())  # the reported one, the tightest
    by_name = {}
    for step, name, value in rows:
        by_name.setdefault(name, {})[step] = value
    assert len(by_name["epsilon_naive"]) > 5 and max(by_name["epsilon_naive"]) == 45  # a grid ending at T
    assert by_name["epsilon_pld"][45] == run.result["epsilons"]["pld"]
    assert store.integrity_ok()
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_identical_submission_is_served_from_the_cache(store):
    first = submit(store, quick_spec())
    assert submit(store, quick_spec()) == first.__class__(run_id=first.run_id, cached=False, existing=True)
    Worker(store, data_dirs=[]).run_one()
    again = submit(store, quick_spec())
    assert again.cached and again.run_id == first.run_id
    forced = submit(store, quick_spec(), force=True)
    assert not forced.cached and forced.run_id != first.run_id
    assert not submit(store, quick_spec(seed=1)).cached


def test_a_failing_run_is_recorded_and_the_worker_goes_on(store, monkeypatch):
    bad = submit(store, parse_spec(fast_spec(dataset="adult", delta=1e-6)))
    good = submit(store, quick_spec())
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)  # no Adult copy, no network
    failed = store.get_run(bad.run_id)
    assert failed.status is RunStatus.FAILED and "DatasetError" in failed.error and "adult" in failed.error
    assert store.get_run(good.run_id).status is RunStatus.FINISHED


def test_cancel_queued_and_running(store):
    queued = submit(store, quick_spec())
    assert store.request_cancel(queued.run_id) is RunStatus.CANCELLED
    assert Worker(store, data_dirs=[]).run_one() is None  # a cancelled run never starts

    running = submit(store, quick_spec(seed=3))
    worker = Worker(store, data_dirs=[])
    original = store.append_metrics

    def cancel_during_training(run_id, rows, **kwargs):
        store.request_cancel(run_id)
        return original(run_id, rows, **kwargs)

    store.append_metrics = cancel_during_training
    run = worker.run_one()
    assert run.id == running.run_id and run.status is RunStatus.CANCELLED
    assert run.result["stopped_early"] and run.result["steps"] < run.total_steps
    assert store.metrics(run.id), "metrics of a cancelled run are kept"
    beyond = [(step, name) for step, name, _ in store.metrics(run.id) if step > run.result["steps"]]
    assert beyond == [], "no accountant curve runs past the steps actually taken"
    finals = {name: value for step, name, value in store.metrics(run.id) if step == run.result["steps"]}
    assert finals["epsilon_pld"] == run.result["epsilons"]["pld"]


def test_stale_runs_are_marked_failed_and_others_untouched(store):
    lost = submit(store, quick_spec())
    other = submit(store, quick_spec(seed=5))
    store.claim_next("dead-worker")
    assert store.fail_stale(older_than_s=-1) == [LostRun(run_id=lost.run_id, requeued=False)]
    assert store.get_run(lost.run_id).error.startswith("worker lost")
    assert [e.status for e in store.events(lost.run_id)] == [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.FAILED]
    assert store.get_run(other.run_id).status is RunStatus.QUEUED


def test_requeue_drops_partial_metrics(store):
    run_id = submit(store, quick_spec()).run_id
    store.claim_next("w")
    store.append_metrics(run_id, [(0, {"epsilon": 0.0}), (1, {"epsilon": 0.1})])
    store.requeue(run_id)
    run = store.get_run(run_id)
    assert run.status is RunStatus.QUEUED and run.progress_step == 0 and store.metrics(run_id) == []


def test_unknown_run_is_a_named_error(store):
    with pytest.raises(StoreError, match="no run with id 'nope'"):
        store.get_run("nope")


def _claim_all(path: str, out: multiprocessing.Queue) -> None:
    store = Store(path)
    claimed = []
    while (run := store.claim_next(f"p{os.getpid()}")) is not None:
        claimed.append(run.id)
    out.put(claimed)


@pytest.mark.slow
def test_concurrent_workers_never_claim_the_same_run(store):
    ids = {store.create_run(spec={"n": i}, cache_key=str(i), engine_version="t") for i in range(60)}
    out = multiprocessing.get_context("spawn").Queue()
    procs = [
        multiprocessing.get_context("spawn").Process(target=_claim_all, args=(str(store.path), out)) for _ in range(3)
    ]
    for p in procs:
        p.start()
    claims = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    flat = [run_id for claim in claims for run_id in claim]
    assert sorted(flat) == sorted(ids), "every run claimed exactly once"


def start_worker_mid_run(home, store, run_id) -> subprocess.Popen:
    """A worker subprocess, returned once it has trained a few steps of `run_id`."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "engine", "worker"],
        cwd=ROOT,
        env=home_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 90
    while store.get_run(run_id).progress_step < 5 and time.time() < deadline:
        time.sleep(0.2)
    assert store.get_run(run_id).status is RunStatus.RUNNING
    return worker


@pytest.mark.slow
def test_worker_stopped_by_sigterm_puts_its_run_back_in_the_queue(home, store):
    run_id = submit(store, parse_spec(fast_spec(epochs=500))).run_id
    worker = start_worker_mid_run(home, store, run_id)
    try:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        worker.kill()
    run = store.get_run(run_id)
    assert run.status is RunStatus.QUEUED and run.progress_step == 0 and store.metrics(run_id) == []


@pytest.mark.slow
def test_worker_killed_mid_run_leaves_a_sound_store(home, store):
    run_id = submit(store, parse_spec(fast_spec(epochs=500))).run_id
    worker = start_worker_mid_run(home, store, run_id)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert store.integrity_ok()
    assert store.fail_stale(older_than_s=-1) == [LostRun(run_id=run_id, requeued=False)]
    assert store.get_run(run_id).status is RunStatus.FAILED


def test_a_lost_run_is_requeued_once_when_its_spec_asks(store):
    training, options = split_job_options(fast_spec(epochs=2, on_worker_lost="requeue"))
    run_id = submit(store, parse_spec(training), options=options).run_id
    store.claim_next("dies-first")
    store.append_metrics(run_id, [(0, {"epsilon": 0.0})])
    assert store.fail_worker_runs("dies-first", reason="worker lost: killed") == [LostRun(run_id=run_id, requeued=True)]
    run = store.get_run(run_id)
    assert run.status is RunStatus.QUEUED and store.metrics(run_id) == [] and run.requeues_left == 0
    store.claim_next("dies-too")
    assert store.fail_stale(older_than_s=-1) == [LostRun(run_id=run_id, requeued=False)]
    run = store.get_run(run_id)
    assert run.status is RunStatus.FAILED and run.error.startswith("worker lost") and run.attempts == 2
    history = [(e.status, e.worker) for e in store.events(run_id)]
    assert history == [
        (RunStatus.QUEUED, None),
        (RunStatus.RUNNING, "dies-first"),
        (RunStatus.QUEUED, None),
        (RunStatus.RUNNING, "dies-too"),
        (RunStatus.FAILED, "dies-too"),
    ]


def test_a_worker_written_off_as_lost_cannot_overwrite_its_run(store):
    run_id = submit(store, quick_spec()).run_id
    store.claim_next("slow")
    store.fail_stale(older_than_s=-1)
    assert not store.finish(run_id, status=RunStatus.FINISHED, result={"x": 1}, worker="slow")
    assert store.get_run(run_id).status is RunStatus.FAILED


def test_heartbeat_keeps_a_run_fresh_and_reports_cancel_requests(store):
    run_id = submit(store, quick_spec()).run_id
    store.register_worker("w", backend="local", host="h", pid=1, device="cpu")
    store.claim_next("w")
    assert store.heartbeat("w", [run_id]) == set()
    store.request_cancel(run_id)
    assert store.heartbeat("w", [run_id]) == {run_id}
    assert store.fail_stale(older_than_s=60) == []
    [worker] = store.list_workers()
    assert worker.name == "w" and worker.current_run == run_id


def test_job_options_are_not_part_of_a_runs_identity(store):
    first = submit(store, quick_spec())
    training, options = split_job_options(fast_spec(epochs=2, on_worker_lost="requeue"))
    assert submit(store, parse_spec(training), options=options).run_id == first.run_id
    with pytest.raises(SpecError, match="on_worker_lost: must be one of 'fail', 'requeue'"):
        split_job_options(fast_spec(on_worker_lost="retry"))


def test_a_new_engine_version_is_not_served_old_results(store, monkeypatch):
    import engine.jobs.submission as submission

    old = submit(store, quick_spec())
    store.claim_next("w")
    store.finish(old.run_id, status=RunStatus.FINISHED, result={"epsilon": 1.0})
    assert submit(store, quick_spec()).cached
    monkeypatch.setattr(submission, "ENGINE_VERSION", "99.0.0")
    fresh = submit(store, quick_spec())
    assert not fresh.cached and not fresh.existing
    assert store.get_run(old.run_id).status is RunStatus.FINISHED, "the old run is kept"


def test_migrating_a_version_1_store_keeps_its_runs(tmp_path):
    from cache.store.schema import MIGRATIONS

    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(MIGRATIONS[0])
        db.execute(
            "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at)"
            " VALUES ('r1', 'k', '{}', '0.1.0', 'finished', 1.0)"
        )
        db.execute("PRAGMA user_version=1")
    store = Store(path)
    run = store.get_run("r1")
    assert run.status is RunStatus.FINISHED and run.attempts == 0
    assert [e.detail for e in store.events("r1")] == ["recorded before status history existed"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_store_from_newer_code_is_refused(tmp_path):
    path = tmp_path / "new.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer than this code"):
        Store(path)

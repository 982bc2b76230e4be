"""Stacks on the jobs side: a sweep's compatible runs share a stack id, a worker claims a stack whole and
trains it as one vectorized model, and every member still ends as its own run."""

import sqlite3

import pytest

import engine.jobs.run_training as run_training
from cache import RunStatus, Store
from cache.store.schema import MIGRATIONS, SCHEMA_VERSION
from engine.jobs import settings
from engine.jobs.recording import RunRecorder, start_stack
from engine.jobs.run_training import StopTraining
from engine.jobs.submission import submit
from engine.jobs.sweep import SweepError, submit_sweep
from engine.jobs.workers.worker import Heartbeat, Worker
from engine.training import parse_spec
from tests.helpers import fast_spec

TINY_BASE = {k: v for k, v in fast_spec(epochs=1, lot_size=128).items() if k != "target_epsilon"}  # 11 steps


def sigma_grid(**overrides) -> dict:
    """σ ∈ {2, 4} × seeds {0, 1}: four runs that can all train as one stack."""
    return {"base": TINY_BASE, "grid": {"noise_multiplier": [2.0, 4.0]}, "seeds": [0, 1]} | overrides


def stack_ids(store: Store, sweep_id: str) -> list[str | None]:
    return [run.stack_id for run in store.list_runs(sweep_id=sweep_id)]


def metric_series(store: Store, run_id: str) -> dict[str, dict[int, float]]:
    series: dict[str, dict[int, float]] = {}
    for step, name, value in store.metrics(run_id):
        series.setdefault(name, {})[step] = value
    return series


# ---------------------------------------------------------------------------------------- the store


def test_a_version_2_store_gains_the_stack_column(tmp_path):
    path = tmp_path / "v2.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(MIGRATIONS[0] + MIGRATIONS[1])
        db.execute(
            "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at)"
            " VALUES ('r1', 'k', '{}', '0.1.0', 'queued', 1.0)"
        )
        db.execute("PRAGMA user_version=2")
    store = Store(path)
    assert store.get_run("r1").stack_id is None
    [claimed] = store.claim_next_group("w")
    assert claimed.id == "r1" and claimed.status is RunStatus.RUNNING
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'runs_by_stack'").fetchone()


def test_claim_next_group_claims_a_whole_stack_and_claim_next_one_run(store):
    lone = submit(store, parse_spec({**TINY_BASE, "noise_multiplier": 3.0})).run_id
    sweep = submit_sweep(store, sigma_grid())
    first, *rest = sweep.run_ids
    assert store.request_cancel(rest[-1]) is RunStatus.CANCELLED  # a cancelled member is not claimed
    assert [r.id for r in store.claim_next_group("w1")] == [lone]
    group = store.claim_next_group("w1")
    assert [r.id for r in group] == [first, *rest[:-1]], "the stack's queued runs, in grid order"
    assert all(r.status is RunStatus.RUNNING and r.worker == "w1" and r.attempts == 1 for r in group)
    assert [e.status for e in store.events(first)] == [RunStatus.QUEUED, RunStatus.RUNNING]
    assert store.claim_next_group("w2") == []

    again = submit_sweep(store, sigma_grid(), force=True)
    single = store.claim_next("w2")
    assert single.id == again.run_ids[0] and single.stack_id is not None
    assert [r.id for r in store.claim_next_group("w3")] == list(again.run_ids[1:]), "the rest of its stack"


# ---------------------------------------------------------------------------------------- the sweep


def test_a_sigma_grid_is_one_stack(store):
    sweep = submit_sweep(store, sigma_grid())
    ids = stack_ids(store, sweep.sweep_id)
    assert len(set(ids)) == 1 and ids[0] is not None and ids[0].startswith("k")
    assert (sweep.stacks, sweep.stacked) == (1, 4)
    assert sweep.to_dict()["stacks"] == 1 and sweep.to_dict()["stacked"] == 4


@pytest.mark.parametrize(("most", "chunks"), [("3", [3, 3, 3, None]), ("2", [2, 2, 2, 2]), ("1", [None] * 4)])
def test_stacks_hold_at_most_dplab_stack_max_runs(store, monkeypatch, most, chunks):
    monkeypatch.setenv("DPLAB_STACK_MAX", most)
    sweep = submit_sweep(store, sigma_grid())
    ids = stack_ids(store, sweep.sweep_id)
    assert [ids.count(i) if i is not None else None for i in ids] == chunks
    assert sweep.stacked == sum(1 for i in ids if i is not None)


def test_only_compatible_runs_share_a_stack(store):
    models = submit_sweep(
        store, sigma_grid(base={**TINY_BASE, "noise_multiplier": 2.0}, grid={"model": ["logreg", "mlp"]}, seeds=[0])
    )
    assert stack_ids(store, models.sweep_id) == [None, None] and models.stacks == 0
    lots = submit_sweep(store, sigma_grid(base={**TINY_BASE, "noise_multiplier": 2.0}, grid={"lot_size": [32, 64]}))
    ids = stack_ids(store, lots.sweep_id)  # (32, seed 0), (32, seed 1), (64, seed 0), (64, seed 1)
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2] and (lots.stacks, lots.stacked) == (2, 4)
    per_layer = submit_sweep(store, sigma_grid(base={**TINY_BASE, "clipping": "per_layer"}))
    assert set(stack_ids(store, per_layer.sweep_id)) == {None}, "only flat clipping stacks"


def test_vectorize_false_and_answered_points_do_not_stack(store):
    plain = submit_sweep(store, sigma_grid(vectorize=False))
    assert set(stack_ids(store, plain.sweep_id)) == {None} and (plain.stacks, plain.stacked) == (0, 0)
    assert store.get_sweep(plain.sweep_id).spec["vectorize"] is False
    mixed = submit_sweep(store, sigma_grid(seeds=[0, 1, 2]))  # 4 of its 6 points are already queued
    assert (mixed.existing, mixed.created, mixed.stacked) == (4, 2, 2)
    ids = stack_ids(store, mixed.sweep_id)  # σ = 2 then 4, seeds 0, 1, 2: the seed-2 runs are new
    assert ids[2] is not None and ids == [None, None, ids[2], None, None, ids[2]]
    with pytest.raises(SweepError, match="must be true or false") as caught:
        submit_sweep(store, sigma_grid(vectorize="yes"))
    assert caught.value.field == "vectorize"


def test_dplab_stack_max_out_of_range_is_refused(monkeypatch):
    monkeypatch.setenv("DPLAB_STACK_MAX", "65")
    with pytest.raises(settings.SettingError, match="DPLAB_STACK_MAX"):
        settings.stack_max()


# ---------------------------------------------------------------------------------------- the worker


def test_a_worker_trains_a_stack_and_ends_each_run_with_its_own_metrics(store):
    sweep = submit_sweep(store, sigma_grid())
    assert Worker(store, data_dirs=[]).run_forever(exit_when_idle=True) == 4
    runs = store.list_runs(sweep_id=sweep.sweep_id)
    assert [r.status for r in runs] == [RunStatus.FINISHED] * 4
    series = {r.id: metric_series(store, r.id) for r in runs}
    for position, run in enumerate(runs):
        assert run.result["stack"]["members"] == 4 and run.result["stack"]["position"] == position
        assert run.result["steps"] == run.total_steps == run.progress_step and not run.result["stopped_early"]
        epsilons = series[run.id]["epsilon"]
        assert sorted(epsilons) == list(range(run.total_steps + 1))
        assert epsilons[run.total_steps] == pytest.approx(run.result["epsilons"]["rdp"])
        assert series[run.id]["test_accuracy"][run.total_steps] == pytest.approx(run.result["test_accuracy"])
        assert series[run.id]["epsilon_pld"][run.total_steps] == run.result["epsilons"]["pld"]
    low, _, high, _ = (series[r.id]["epsilon"][r.total_steps] for r in runs)
    assert low > high, "σ = 2 spends more than σ = 4"
    # each seed its own model (losses, not accuracies: two models can agree on every test label by chance)
    assert runs[0].result["test_loss"] != runs[1].result["test_loss"], "each seed its own model"


def test_runs_with_one_ledger_share_one_accounting_thread(store):
    submit_sweep(store, sigma_grid())
    runs = store.claim_next_group("w")
    recorders = [RunRecorder(store, run, worker="w") for run in runs]
    plans = start_stack(recorders)
    try:
        assert [p.noise_multiplier for p in plans] == [2.0, 2.0, 4.0, 4.0]
        accounting = recorders[0].accounting
        assert all(r.accounting is accounting for r in recorders)
        assert [c.run_ids for c in accounting.curves] == [(runs[0].id, runs[1].id), (runs[2].id, runs[3].id)]
    finally:
        accounting.close()


def test_a_cancelled_member_stops_while_the_others_finish(store):
    sweep = submit_sweep(store, sigma_grid())
    target = sweep.run_ids[1]
    original = store.append_metrics

    def cancel_the_target(run_id, rows, *, advance=True):
        if run_id == target and advance:
            store.request_cancel(run_id)
        return original(run_id, rows, advance=advance)

    store.append_metrics = cancel_the_target
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    runs = {r.id: r for r in store.list_runs(sweep_id=sweep.sweep_id)}
    cancelled = runs.pop(target)
    assert cancelled.status is RunStatus.CANCELLED and cancelled.result["stopped_early"]
    assert cancelled.result["steps"] < cancelled.total_steps
    assert max(step for step, _, _ in store.metrics(target)) == cancelled.result["steps"]
    for run in runs.values():
        assert run.status is RunStatus.FINISHED and run.result["steps"] == run.total_steps


def test_a_failing_stack_fails_every_member(store, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(run_training, "train_stack", boom)
    sweep = submit_sweep(store, sigma_grid())
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    runs = store.list_runs(sweep_id=sweep.sweep_id)
    assert [(r.status, r.error) for r in runs] == [(RunStatus.FAILED, "RuntimeError: boom")] * 4


def test_a_stopping_worker_puts_the_whole_stack_back_in_the_queue(store, monkeypatch):
    def stop(*args, **kwargs):
        raise StopTraining

    monkeypatch.setattr(run_training, "train_stack", stop)
    sweep = submit_sweep(store, sigma_grid())
    worker = Worker(store, data_dirs=[])
    assert len(worker.run_next()) == 4 and worker.stopping
    runs = store.list_runs(sweep_id=sweep.sweep_id)
    assert {r.status for r in runs} == {RunStatus.QUEUED} and len({r.stack_id for r in runs}) == 1
    assert all(store.metrics(r.id) == [] for r in runs)
    assert len(store.claim_next_group("next")) == 4, "claimed together again"


def test_the_heartbeat_beats_for_every_run_in_hand(store):
    sweep = submit_sweep(store, sigma_grid())
    store.register_worker("w", backend="local", host="h", pid=1, device="cpu")
    runs = store.claim_next_group("w")
    heartbeat = Heartbeat(store, "w", every_s=60)
    heartbeat.run_ids = tuple(sweep.run_ids)
    store.request_cancel(sweep.run_ids[2])
    heartbeat.beat()
    assert heartbeat.cancelled == {sweep.run_ids[2]}
    assert all(store.get_run(r.id).heartbeat_at > r.heartbeat_at for r in runs)

"""A run that restarts is charged what its earlier attempts released: the store records each attempt at the
requeue, the next attempt's plan carries it, and a stack's joint ledger charges it the same way."""

import math
from dataclasses import replace

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from cache import RunStatus, Store
from engine.jobs.recording import RunRecorder
from engine.jobs.submission import submit
from engine.jobs.transfer import export_runs, import_runs
from engine.jobs.workers.worker import Worker
from engine.privacy import PrivacyError, panel
from engine.privacy.restarts import charge_earlier_attempts
from engine.training import parse_spec, plan_spec
from engine.training.trainers.stack import joint_ledger
from tests.helpers import fast_spec

WORKER = "tester:1"
SIGMA = 1.0


def spec(**changes) -> dict:
    return {
        k: v for k, v in fast_spec(epochs=2, target_epsilon=None, noise_multiplier=SIGMA).items() if v is not None
    } | changes


def claimed(store: Store, raw: dict) -> str:
    run_id = submit(store, parse_spec(raw)).run_id
    [run] = store.claim_next_group(WORKER)
    assert run.id == run_id
    return run_id


def rdp_of(q: float, sigma: float, steps: int, delta: float, *, upfront: tuple = ()) -> float:
    step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    events = [*upfront, dp_event.SelfComposedDpEvent(step, steps)]
    return RdpAccountant().compose(dp_event.ComposedDpEvent(events)).get_epsilon(delta)


@pytest.mark.parametrize("noise", ["release", "reproducible"])
def test_a_requeue_records_the_attempt_and_the_next_plan_charges_it(store: Store, noise: str):
    run_id = claimed(store, spec(noise=noise))
    store.append_metrics(run_id, [(step, {"epsilon": 0.1, "test_accuracy": 0.5}) for step in range(31)])
    assert store.requeue(run_id, worker=WORKER, reason="worker stopping")
    run = store.get_run(run_id)
    assert run.status is RunStatus.QUEUED and store.metrics(run_id) == []
    assert run.earlier_attempts == ({"steps": 30, "released": True, "reason": "worker stopping"},)
    [again] = store.claim_next_group(WORKER)
    plan = RunRecorder(store, again, worker=WORKER).record_plan()
    assert plan.earlier_attempts == (30,) and plan.earlier_noise_replayed == (noise == "reproducible")
    assert store.get_run(run_id).plan["earlier_attempts"] == [30]
    q, delta = plan.sampling_rate, plan.delta
    ledger = plan.ledger()
    rdp = panel(plan.ledger(10), delta=delta, names=("rdp",)).final()["rdp"]
    if noise == "release":  # fresh noise: 30 steps more, whatever this attempt takes
        assert rdp == pytest.approx(rdp_of(q, SIGMA, 40, delta), rel=1e-9)
        assert ledger.upfront[0].count == 30 and "attempt 1 of 2, stopped after 30 steps" in ledger.upfront[0].label
    else:  # the same noise: the first 30 steps are released once
        assert rdp == pytest.approx(rdp_of(q, SIGMA, 30, delta), rel=1e-9)
        assert panel(plan.ledger(40), delta=delta, names=("rdp",)).final()["rdp"] == pytest.approx(
            rdp_of(q, SIGMA, 40, delta), rel=1e-9
        )


def test_an_attempt_that_stored_nothing_released_nothing(store: Store):
    run_id = claimed(store, spec(noise="release"))
    store.requeue(run_id, worker=WORKER, reason="worker stopping")
    assert store.get_run(run_id).earlier_attempts[0]["released"] is False
    [again] = store.claim_next_group(WORKER)
    plan = RunRecorder(store, again, worker=WORKER).record_plan()
    assert plan.earlier_attempts == () and plan.ledger() == plan.attempt_ledger()


def test_a_failed_or_lost_run_keeps_no_curve_past_its_last_step(store: Store):
    """The worker computes the other accountants' curves ahead of training; a run that fails shows ε spent only."""
    raw = spec()
    failing, lost = claimed(store, raw | {"seed": 1}), claimed(store, raw | {"seed": 2})
    for run_id, last in ((failing, 3), (lost, 5)):
        store.append_metrics(run_id, [(step, {"epsilon": 0.1}) for step in range(last + 1)])
        store.append_metrics(run_id, [(400, {"epsilon_naive": 9.0})], advance=False)  # computed ahead
    RunRecorder(store, store.get_run(failing), worker=WORKER).failed("ValueError: broken")
    assert max(step for step, _, _ in store.metrics(failing)) == 3
    [written_off] = store.fail_worker_runs(WORKER, reason="worker lost: killed")
    assert written_off.run_id == lost and not written_off.requeued  # its spec did not ask for a requeue
    assert store.get_run(lost).status is RunStatus.FAILED
    assert max(step for step, _, _ in store.metrics(lost)) == 5


def test_a_restarted_stack_charges_its_joint_ledger_each_attempt():
    plans = [
        replace(plan_spec(parse_spec(spec(noise_multiplier=sigma, noise="release"))), earlier_attempts=(attempt,))
        for sigma, attempt in ((1.0, 20), (2.0, 22))
    ]
    ledger = joint_ledger(plans)
    sigma_joint = (1.0**-2 + 2.0**-2) ** -0.5
    q, delta, steps = plans[0].sampling_rate, plans[0].delta, plans[0].steps
    assert ledger.upfront[0].count == 22  # the longer member's attempt: they stopped together
    expected = rdp_of(q, sigma_joint, steps + 22, delta)
    assert panel(ledger, delta=delta, names=("rdp",)).final()["rdp"] == pytest.approx(expected, rel=1e-9)
    lab = joint_ledger([replace(p, earlier_noise_replayed=True) for p in plans])
    assert lab.replayed_steps == 22 and lab.upfront == ()


def test_earlier_attempts_must_be_steps_and_the_ledger_refuses_replaying_beyond_its_steps():
    plan = plan_spec(parse_spec(spec()))
    with pytest.raises(PrivacyError, match="non-negative integers"):
        charge_earlier_attempts(plan.attempt_ledger(), [-1], replayed=False)
    with pytest.raises(PrivacyError, match="replayed_steps"):
        replace(plan.attempt_ledger(), replayed_steps=plan.steps + 1)
    beyond = charge_earlier_attempts(plan.attempt_ledger(), [plan.steps + 50], replayed=False)
    assert beyond.upfront[0].count == plan.steps  # an attempt never released more than its plan's steps
    assert math.isfinite(panel(beyond, delta=plan.delta, names=("rdp",)).final()["rdp"])


def test_an_exported_restarted_run_carries_its_attempts_and_imports(store: Store, tmp_path):
    """The default export (released values only) carries the earlier attempts in the plan and the result."""
    run_id = claimed(store, spec(noise="release", epochs=1))
    store.append_metrics(run_id, [(step, {"epsilon": 0.1}) for step in range(13)])
    store.requeue(run_id, worker=WORKER)
    Worker(store, data_dirs=[]).run_one()
    run = store.get_run(run_id)
    assert run.status is RunStatus.FINISHED and run.result["restart"]["earlier_attempts"] == [12]
    elsewhere = Store(tmp_path / "elsewhere.sqlite3")
    import_runs(elsewhere, export_runs(store, [run_id]))
    copy = elsewhere.get_run(run_id)
    assert copy.plan["earlier_attempts"] == [12] and copy.plan["earlier_noise"] == "fresh"
    assert copy.result["restart"] == run.result["restart"] and copy.result["epsilon"] == run.result["epsilon"]

"""A σ planned at submission (by the dashboard) is checked by the worker's own accountant, never trusted: taken
only when it meets the target and spends at least 99% of it, recalibrated otherwise."""

import pytest

from cache import RunStatus
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.privacy import dpsgd_step_event, single_phase
from engine.privacy.calibration import HINT_SLACK, calibrate_sigma, final_epsilon
from engine.training import parse_spec, plan_spec
from tests.helpers import fast_spec

Q, STEPS, DELTA, TARGET = 0.01, 2_000, 1e-5, 2.0


def ledger(sigma: float):
    return single_phase(dpsgd_step_event(sampling_rate=Q, noise_multiplier=sigma), STEPS)


@pytest.fixture(scope="module")
def searched() -> float:
    return calibrate_sigma(ledger, target_epsilon=TARGET, delta=DELTA)


def test_a_right_hint_is_taken_as_is(searched):
    assert calibrate_sigma(ledger, target_epsilon=TARGET, delta=DELTA, hint=searched) == searched


@pytest.mark.parametrize("factor", [0.9, 0.999, 1.05, 3.0])
def test_a_wrong_hint_is_searched_again(searched, factor):
    """Too little noise (ε above the target) would break the guarantee; too much would waste utility."""
    hint = searched * factor
    spent = final_epsilon(ledger(hint), delta=DELTA)
    assert not (1 - HINT_SLACK) * TARGET <= spent <= TARGET  # the hint really fails the check
    assert calibrate_sigma(ledger, target_epsilon=TARGET, delta=DELTA, hint=hint) == searched


def test_a_hint_within_the_slack_is_valid_and_close(searched):
    hint = searched * 1.002  # a little more noise: ε a little under the target
    sigma = calibrate_sigma(ledger, target_epsilon=TARGET, delta=DELTA, hint=hint)
    assert sigma == hint
    assert (1 - HINT_SLACK) * TARGET <= final_epsilon(ledger(sigma), delta=DELTA) <= TARGET


@pytest.mark.parametrize("hint", [float("nan"), -1.0, 0.0, 1e9])
def test_a_nonsense_hint_is_ignored(searched, hint):
    assert calibrate_sigma(ledger, target_epsilon=TARGET, delta=DELTA, hint=hint) == searched


def test_the_worker_confirms_the_submitted_plan_and_trains_with_it(store):
    spec = parse_spec(fast_spec(epochs=1))
    planned = plan_spec(spec).noise_multiplier
    run_id = submit(store, spec, planned_noise_multiplier=planned).run_id
    assert store.get_run(run_id).plan == {"noise_multiplier": planned}
    Worker(store).run_one()
    run = store.get_run(run_id)
    assert run.status is RunStatus.FINISHED
    assert run.plan["noise_multiplier"] == planned and run.plan["steps"] == run.total_steps


def test_the_worker_replaces_a_planned_sigma_that_breaks_the_target(store):
    spec = parse_spec(fast_spec(epochs=1))
    right = plan_spec(spec).noise_multiplier
    run_id = submit(store, spec, planned_noise_multiplier=right / 2).run_id  # half the noise: ε far above 3
    Worker(store).run_one()
    run = store.get_run(run_id)
    assert run.status is RunStatus.FINISHED
    assert run.plan["noise_multiplier"] == right
    assert run.result["epsilon"] <= 3.0

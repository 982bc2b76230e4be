"""The run panel's note on a restarted run, from its stored plan and result."""

import math
from dataclasses import replace

from app.common.restart_note import restart_text
from cache import Store
from engine.jobs.recording import RunRecorder
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests.helpers import fast_spec

WORKER = "tester:1"


def restarted(store: Store, noise: str):
    run_id = submit(store, parse_spec(fast_spec(epochs=1, noise=noise))).run_id
    store.claim_next_group(WORKER)
    store.append_metrics(run_id, [(step, {"epsilon": 0.1}) for step in range(8)])
    store.requeue(run_id, worker=WORKER)
    [run] = store.claim_next_group(WORKER)
    RunRecorder(store, run, worker=WORKER).record_plan()
    return store.get_run(run_id)


def test_a_restarted_run_says_what_its_earlier_attempt_released_in_either_mode(store: Store):
    fresh, replayed = restarted(store, "release"), restarted(store, "reproducible")
    assert "released 7 step(s)" in restart_text(fresh) and "fresh noise (release mode)" in restart_text(fresh)
    assert "replays their lots and noise (lab mode)" in restart_text(replayed)


def test_a_run_that_did_not_restart_or_holds_a_malformed_plan_says_nothing_or_no_number(store: Store):
    run = restarted(store, "release")
    assert restart_text(replace(run, plan={})) is None
    odd = replace(run, plan={"earlier_attempts": ["x"]}, result={"restart": {"epsilon_this_attempt": math.inf}})
    assert "released ? step(s)" in restart_text(odd) and "ε = ∞" in restart_text(odd)

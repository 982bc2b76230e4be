"""The notebook API (`engine.api`, reachable as `engine.plan`, `engine.submit`, ...) gives the numbers the CLI and
the pages give, and `import engine` stays light (no torch until a training function is used)."""

import subprocess
import sys

import pytest

import engine
from engine.jobs.workers.worker import Worker
from engine.privacy import panel
from engine.training import parse_spec, plan_spec
from tests.helpers import ROOT, fast_spec


def test_plan_calibrate_and_epsilons_are_the_engines_own():
    raw = fast_spec()
    planned = engine.plan(raw)
    assert planned == plan_spec(parse_spec(raw))
    by_accountant = engine.epsilons(planned.ledger(), delta=planned.delta)
    assert by_accountant == panel(planned.ledger(), delta=planned.delta).final()
    assert by_accountant["rdp"] <= raw["target_epsilon"]
    sigma = engine.calibrate(
        target_epsilon=3.0, delta=1e-5, sampling_rate=planned.sampling_rate, steps=planned.steps, accountant="rdp"
    )
    assert sigma == pytest.approx(planned.noise_multiplier, rel=1e-3)


def test_submit_then_read_the_run_and_its_metrics_as_frames(store):
    run_id = engine.submit(fast_spec(epochs=1), store=store)
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    runs = engine.runs(store=store)
    assert list(runs["id"]) == [run_id] and runs.loc[0, "status"] == "finished"
    assert runs.loc[0, "epsilon"] == store.get_run(run_id).result["epsilon"]
    frame = engine.metrics(run_id, store=store)
    assert list(frame["step"]) == list(range(store.get_run(run_id).total_steps + 1))
    assert {"epsilon", "test_accuracy"} <= set(frame.columns)


def test_an_unknown_name_is_an_attribute_error_and_the_privacy_package_needs_no_torch():
    with pytest.raises(AttributeError):
        _ = engine.no_such_function
    code = "import sys, engine, engine.privacy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

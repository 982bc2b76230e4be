"""The algorithms' step registry: `make_step` builds the step an algorithm module registered, an algorithm without
one raises a named error, and importing the registry alone registers every gradient algorithm."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from engine.training.algorithms import registry
from engine.training.algorithms.registry import StepContext, StepNotRegisteredError, StepStats, make_step, register_step
from engine.training.config.keys import Algorithm
from tests.helpers import ROOT


def context_of(algorithm: str) -> StepContext:
    spec = SimpleNamespace(algorithm=algorithm)
    return StepContext(spec=spec, plan=None, model=None, optimizer=None, x=None, y=None, streams={})


def test_make_step_builds_the_step_a_module_registered(monkeypatch):
    monkeypatch.setattr(registry, "STEP_BUILDERS", dict(registry.STEP_BUILDERS))
    seen = []

    @register_step("throwaway")
    def throwaway_steps(context: StepContext):
        seen.append(context)
        return lambda step: StepStats(lot_size=step, loss_sum=0.0, clipped_fraction=None)

    context = context_of("throwaway")
    step = make_step(context)
    assert seen == [context]  # built once, from the context it was given
    assert step(7) == StepStats(lot_size=7, loss_sum=0.0, clipped_fraction=None)
    with pytest.raises(ValueError, match="throwaway"):  # one builder per algorithm
        register_step("throwaway")(throwaway_steps)


@pytest.mark.parametrize("algorithm", ["no_such_algorithm", Algorithm.RWM_ONLINE.value])
def test_an_algorithm_without_a_registered_step_raises_the_named_error(algorithm):
    with pytest.raises(StepNotRegisteredError, match=algorithm):
        make_step(context_of(algorithm))


def test_a_learner_is_told_to_train_through_its_own_route():
    with pytest.raises(StepNotRegisteredError, match="learner_runs"):
        make_step(context_of(Algorithm.SQ_LAPLACE.value))


def test_importing_the_registry_alone_registers_every_gradient_algorithm():
    code = "from engine.training.algorithms.registry import STEP_BUILDERS; print(' '.join(sorted(STEP_BUILDERS)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == sorted(a.value for a in Algorithm if not a.learner)

"""What every textbook learner returns and the small helpers they share (randomness, report points, stopping)."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.training import noise
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec


@dataclass(frozen=True, kw_only=True)
class LearnerOutcome:
    test_accuracy: float
    test_loss: float
    steps: int  # steps actually taken (fewer when stopped)


Report = Callable[..., None]  # report(step, **metrics): metrics as StepRecord fields (test_accuracy, regret, ...)
ShouldStop = Callable[[], bool] | None

MAX_REPORTS = 200  # long runs (RWM rounds) report at most this many evenly spaced steps, plus the last


def learner_rng(spec: RunSpec, learner_constant: int) -> np.random.Generator:
    """The learner's randomness: a function of its whole spec and a fixed constant per learner (`noise`: two
    distinct runs never share it; anyone holding the record regenerates it, as in the lab mode of DP-SGD)."""
    return noise.learner_rng(spec, str(learner_constant))


def report_points(steps: int, most: int = MAX_REPORTS) -> set[int]:
    """At most `most` evenly spaced steps in 1..steps, always including the last."""
    return {int(s) for s in np.linspace(0, steps, min(steps, most) + 1).round()[1:]} | {steps}


def stopped(should_stop: ShouldStop) -> bool:
    return bool(should_stop and should_stop())


def parameter(plan: TrainingPlan, name: str) -> float:
    """One of the plan's public mechanism parameters (η, ε_q, Laplace scale, ...)."""
    return dict(plan.learner_parameters)[name]


def check_data(plan: TrainingPlan, n_train: int) -> None:
    if plan.n_train != n_train:
        raise ValueError(f"plan is for N={plan.n_train} but the training set has N={n_train}")

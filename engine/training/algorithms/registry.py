"""The algorithms' steps, by name: what a step is given (`StepContext`), what it reports (`StepStats`), and the
table from an algorithm to the builder of its step (`register_step`, `make_step`).

Each algorithm module registers its builder where it defines its step:

    @register_step(Algorithm.DPSGD)
    def dpsgd_steps(context: StepContext) -> Callable[[int], StepStats]: ...

`engine.training.algorithms` imports every algorithm module, so the table is full once anything in the package
is imported. A new algorithm is one module with its step and its builder, its import line in the package
`__init__`, and its name in `engine.training.config.keys.Algorithm` (with its spec keys and catalogue entry).

The textbook learners (`algorithms.learners`) have no step here: they draw no lots and take no optimizer, and
train through their own route (`algorithms.learners.learner_runs.train_learner`, called by the single-run trainer
for every `Algorithm.learner`).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from engine.training.augmentation import Augmentation
from engine.training.canaries import GradientCanaries
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.noise import Stream


@dataclass(frozen=True)
class StepStats:
    """What one step saw of the private data: diagnostics, never released."""

    lot_size: int
    loss_sum: float
    clipped_fraction: float | None
    # quantiles of the lot's per-example gradient norms before clipping (`dpsgd.GRAD_NORM_QUANTILES`)
    grad_norm_p10: float | None = None
    grad_norm_p50: float | None = None
    grad_norm_p90: float | None = None
    correct: int | None = None  # examples of the lot the model classified right, from the step's own logits


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """Everything a step builder may use: the run's spec and plan, the model and its optimizer, the training
    inputs the model sees (`x`, `y`, on the run's device), the run's random streams, and DP-SGD's extras (an
    audit's gradient canaries, the augmentation of its lots; None without)."""

    spec: RunSpec
    plan: TrainingPlan
    model: nn.Module
    optimizer: torch.optim.Optimizer
    x: Tensor
    y: Tensor
    streams: Mapping[str, Stream]
    canaries: GradientCanaries | None = None
    augmentation: Augmentation | None = None


Step = Callable[[int], StepStats]  # the step as a function of the (1-based) step number
StepBuilder = Callable[[StepContext], Step]
STEP_BUILDERS: dict[str, StepBuilder] = {}


class StepNotRegisteredError(LookupError):
    """An algorithm with no registered step (a textbook learner, or a name no module registered)."""


def register_step(algorithm: str) -> Callable[[StepBuilder], StepBuilder]:
    """The decorator that registers a builder as `algorithm`'s step (one builder per algorithm)."""

    def register(builder: StepBuilder) -> StepBuilder:
        if algorithm in STEP_BUILDERS:
            raise ValueError(f"algorithm {algorithm!r} already has a step ({STEP_BUILDERS[algorithm].__qualname__})")
        STEP_BUILDERS[str(algorithm)] = builder
        return builder

    return register


def step_builder(algorithm: str) -> StepBuilder:
    if algorithm not in STEP_BUILDERS:
        learner = algorithm in tuple(Algorithm) and Algorithm(algorithm).learner
        route = " (a textbook learner: it trains through `learner_runs.train_learner`)" if learner else ""
        raise StepNotRegisteredError(
            f"algorithm {algorithm!r} has no registered step{route}; registered: {', '.join(sorted(STEP_BUILDERS))}"
        )
    return STEP_BUILDERS[algorithm]


def make_step(context: StepContext) -> Step:
    """The step of `context.spec.algorithm`, built from `context` by its registered builder."""
    return step_builder(str(context.spec.algorithm))(context)


__all__ = [
    "STEP_BUILDERS",
    "Step",
    "StepBuilder",
    "StepContext",
    "StepNotRegisteredError",
    "StepStats",
    "make_step",
    "register_step",
    "step_builder",
]

"""What a run reaches once it trains, checked from the spec alone (no data read, nothing trained), so that a
spec every door accepts is one a worker can train:

- schedules: the learning rate, C and σ stay in their keys' ranges (`keys.RANGES`) at every step the run takes,
  base value × the schedule's multiplier. With a target ε the base σ is calibrated later (`plan.plan_run`, which
  checks the calibrated σ the same way); here the multipliers alone must span no more than σ's range allows;
- gradient canaries: at most one per trainable coordinate of the model the spec builds (`audit.canary_count_problem`),
  the coordinates counted on torch's "meta" device (`models.trainable_coordinates`) with the inputs the model will
  see: the dataset's features, ScatterNet's, or the PCA dimensions.

Each check returns a `(field, problem)` pair (or None) that `spec.parse_spec` raises as its `SpecError`.
"""

from typing import TYPE_CHECKING, Any

from engine.privacy.limits import NumberRange
from engine.privacy.planning import steps_for
from engine.training.config.audit import canary_count_problem
from engine.training.config.keys import RANGES, SCHEDULES, Algorithm
from engine.training.config.schedules import Schedule, ScheduleKind
from engine.training.datasets import DatasetInfo
from engine.training.features import scatternet
from engine.training.models.architectures import model_image_shape, trainable_coordinates
from engine.training.models.registry import model_entry

if TYPE_CHECKING:
    from engine.training.config.spec import RunSpec

Problem = tuple[str, str] | None
# the value each schedule multiplies, and the range its product keeps
SCHEDULED = {
    "lr_schedule": ("lr", "lr"),
    "clip_schedule": ("clip_norm", "C"),
    "noise_schedule": ("noise_multiplier", "σ"),
}


class StepClock:
    """The steps of a run and the epoch each starts in (`TrainingPlan.epoch_of(step - 1)`)."""

    def __init__(self, spec: "RunSpec", info: DatasetInfo):
        self.n_train = info.n_train
        self.lot_size = info.n_train if spec.algorithm == Algorithm.NOISY_GD else spec.lot_size
        self.steps = steps_for(epochs=spec.epochs, n_train=self.n_train, lot_size=self.lot_size)

    def epoch_of_step(self, step: int) -> float:
        return (step - 1) * self.lot_size / self.n_train


def schedule_outside(
    field: str, schedule: Schedule, *, base: float, allowed: NumberRange, steps: int, lot_size: int, n_train: int
) -> str | None:
    """The problem of a schedule that takes `base` × multiplier out of `allowed` at some step (None: it stays in)."""
    key, symbol = SCHEDULED[field]
    if schedule.kind is ScheduleKind.CONSTANT:
        return None

    def epoch_of_step(step: int) -> float:
        return (step - 1) * lot_size / n_train

    found = schedule.first_step_outside(base=base, allowed=allowed, steps=steps, epoch_of_step=epoch_of_step)
    if found is None:
        return None
    step, value = found
    return (
        f"takes {symbol} to {value:.3g} at epoch {epoch_of_step(step):.4g} (step {step:,} of {steps:,}): "
        f"{symbol} = {key} {base:g} × the schedule's multiplier must stay {allowed.describe()} at every step"
    )


def schedules_problem(spec: "RunSpec", info: DatasetInfo) -> Problem:
    """The first schedule that leaves its key's range during the run."""
    clock = StepClock(spec, info)
    for field in SCHEDULES:
        schedule = getattr(spec, field)
        key, symbol = SCHEDULED[field]
        if schedule is None or schedule.kind is ScheduleKind.CONSTANT:
            continue
        base, allowed = getattr(spec, key), RANGES[key]
        if base is None:  # σ calibrated for a target ε later: the multipliers alone must fit σ's range
            span = allowed.high / allowed.low
            found = schedule.first_step_outside(
                base=1.0,
                allowed=NumberRange(low=1 / span, high=span),
                steps=clock.steps,
                epoch_of_step=clock.epoch_of_step,
            )
            if found is not None:
                step, factor = found
                return field, (
                    f"multiplies {symbol} by {factor:.3g} at epoch {clock.epoch_of_step(step):.4g} (step {step:,} of "
                    f"{clock.steps:,}): no calibrated {symbol} keeps {symbol} × multiplier "
                    f"{allowed.describe()} when the multipliers span more than ×{span:,.0f}"
                )
            continue
        problem = schedule_outside(
            field,
            schedule,
            base=base,
            allowed=allowed,
            steps=clock.steps,
            lot_size=clock.lot_size,
            n_train=clock.n_train,
        )
        if problem is not None:
            return field, problem
    return None


def model_inputs(spec: "RunSpec", info: DatasetInfo) -> int:
    """How many input features the spec's model takes."""
    if spec.pca_dims is not None:
        return spec.pca_dims
    if spec.features == "scatternet":
        channels, height, width = scatternet.scattering_shape(info.image_shape)
        return channels * height * width
    return info.n_features


def model_options(spec: "RunSpec", image_shape: tuple[int, int, int] | None) -> dict[str, Any]:
    """`models.build_model`'s keywords for the spec's model on a dataset of `image_shape`, besides the inputs and
    classes (the spec keys its registry entry names, `ModelEntry.options`): the worker builds its model with them,
    and `spec_coordinates` counts that model."""
    options = {key: getattr(spec, key) for key in model_entry(spec.model).options}  # those that shape it
    return options | {"image_shape": model_image_shape(spec.features, image_shape), "features": spec.features}


def spec_coordinates(spec: "RunSpec", info: DatasetInfo) -> int:
    """The trainable coordinates of the model the spec trains (what the worker's `sum(p.numel())` counts)."""
    options = model_options(spec, info.image_shape)
    return trainable_coordinates(spec.model, n_features=model_inputs(spec, info), n_classes=info.n_classes, **options)


def canaries_problem(spec: "RunSpec", info: DatasetInfo) -> Problem:
    """Gradient canaries beyond the model's trainable coordinates (input canaries take none)."""
    if spec.audit is None or spec.audit["kind"] != "gradient":
        return None
    problem = canary_count_problem(spec.audit["canaries"], spec_coordinates(spec, info))
    return None if problem is None else ("audit", problem)

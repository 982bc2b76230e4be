"""How long a run takes on this machine, measured before it trains: time a few real training steps of its
configuration (model, features, lot size, clipping path, canaries, augmentation, averaging; on this machine's
device) on a subset of its dataset with the run's own expected lot size, and one evaluation on part of its test
set; a run's duration is then its setup, its steps and its evaluations at that pace (`Pace.seconds`).

A step's cost does not depend on the values that set the run's privacy or its length (σ, ε, δ, C, the learning
rate, the seed, the epochs): `pace_shape` drops them, so one measurement serves every run of the same shape. The
textbook learners (no model, no lots) are timed by training the run itself for a moment.

The subset is set up and timed with the same code the trainer runs (`run_setup.build_training`, its step from the
algorithm's registry, `run_results.evaluate`); the lot is drawn by Poisson sampling at rate L/M over the subset's
M examples, so the lots have the run's size L.
"""

import dataclasses
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan, plan_spec
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset
from engine.training.inputs import load_spec_dataset
from engine.training.run_results import EVALUATIONS_PER_RUN, evaluate
from engine.training.run_setup import build_training, pick_device
from engine.training.trainers.single_run import train

# The spec keys that leave a step's cost as it is: the privacy parameters, the run's length and its randomness.
PACE_FREE_KEYS = frozenset(
    {
        "seed",
        "epochs",
        "rounds",
        "target_epsilon",
        "noise_multiplier",
        "fill_budget",
        "calibration_accountant",
        "delta",
        "clip_norm",
        "clip_schedule",
        "noise_schedule",
        "lr",
        "lr_schedule",
        "momentum",
        "count_epsilon",
        "pca_noise",
        "noise",
    }
)
WARMUP_STEPS = 2  # not timed: the first steps build graphs and warm caches
MIN_TIMED_STEPS, MAX_TIMED_STEPS = 3, 40
TIMING_BUDGET_S = 2.0  # steps are timed until this much time has passed (and at least MIN_TIMED_STEPS)
SUBSET_LOTS = 4  # the subset holds this many expected lots (and at least SUBSET_MIN examples)
SUBSET_MIN = 512
TEST_SUBSET = 1_000  # test examples evaluated (the time is scaled to the whole test set)
LEARNER_BUDGET_S = 2.0  # a textbook learner trains this long at most to time its steps


@dataclass(frozen=True, kw_only=True)
class Pace:
    """What one run of a shape costs here: a training step, one evaluation on the whole test set, and the setup
    (loading the dataset and preparing its features) before the first step."""

    step_s: float
    evaluation_s: float
    setup_s: float
    device: str
    steps_timed: int

    def seconds(self, steps: int) -> float:
        """The duration of a run of `steps` steps: setup, steps, and the trainer's evaluations (one before the
        first step, then every `steps // EVALUATIONS_PER_RUN` steps)."""
        evaluations = 1 + steps // max(1, steps // EVALUATIONS_PER_RUN) if steps else 1
        return self.setup_s + steps * self.step_s + evaluations * self.evaluation_s


def pace_shape(spec: RunSpec) -> dict[str, Any]:
    """The part of a spec that sets the cost of its steps (two specs with equal shapes train at one pace)."""
    return {key: value for key, value in spec.to_dict().items() if key not in PACE_FREE_KEYS}


def measure_pace(
    spec: RunSpec,
    *,
    data_dirs: Sequence[Path] = (),
    plan: TrainingPlan | None = None,
    device: torch.device | None = None,
) -> Pace:
    """Time a few training steps of `spec` on this machine (DatasetError when its files are missing)."""
    device = device or pick_device()
    started = time.perf_counter()
    data = load_spec_dataset(spec, data_dirs)
    loaded_s = time.perf_counter() - started
    plan = plan or plan_spec(spec)
    if Algorithm(spec.algorithm).learner:
        return _learner_pace(spec, plan, data, loaded_s=loaded_s, device=device)
    n_train, n_test = len(data.x_train), len(data.x_test)
    subset = n_train if plan.full_batch else min(n_train, max(SUBSET_MIN, SUBSET_LOTS * plan.lot_size))
    tests = min(n_test, TEST_SUBSET)
    part = dataclasses.replace(
        data,
        x_train=data.x_train[:subset],
        y_train=data.y_train[:subset],
        x_test=data.x_test[:tests],
        y_test=data.y_test[:tests],
    )
    small = plan if plan.full_batch else dataclasses.replace(plan, n_train=subset)  # lots of the run's size L

    run = build_training(spec, small, part, device)
    features_s = run.inputs_s * n_train / subset  # features cost each example alike

    times: list[float] = []
    step, timing_started = 0, None
    while step < min(small.steps, WARMUP_STEPS + MAX_TIMED_STEPS):
        step += 1
        began = _now(device)
        run.step(step)
        if run.average is not None:
            run.average.update()
        if step > WARMUP_STEPS:
            times.append(_now(device) - began)
            timing_started = timing_started or began
            if len(times) >= MIN_TIMED_STEPS and _now(device) - timing_started >= TIMING_BUDGET_S:
                break
    began = _now(device)
    evaluate(run.released, run.x_test, run.y_test)
    evaluation_s = (_now(device) - began) * n_test / tests
    return Pace(
        step_s=statistics.median(times) if times else 0.0,
        evaluation_s=evaluation_s,
        setup_s=loaded_s + features_s,
        device=str(device),
        steps_timed=len(times),
    )


def _learner_pace(spec: RunSpec, plan: TrainingPlan, data: Dataset, *, loaded_s: float, device) -> Pace:
    """A textbook learner's pace: the run itself, trained for at most `LEARNER_BUDGET_S` (its report of step 0
    starts the clock; its evaluations are part of its steps)."""
    reports: list[tuple[int, float]] = []
    deadline = time.perf_counter() + LEARNER_BUDGET_S
    train(
        spec,
        plan=plan,
        dataset=data,
        device=device,
        on_step=lambda record: reports.append((record.step, time.perf_counter())),
        should_stop=lambda: time.perf_counter() > deadline,
    )
    (first_step, first_at), (last_step, last_at) = reports[0], reports[-1]
    steps = last_step - first_step
    return Pace(
        step_s=(last_at - first_at) / steps if steps else 0.0,
        evaluation_s=0.0,
        setup_s=loaded_s,
        device=str(device),
        steps_timed=steps,
    )


def _now(device: torch.device) -> float:
    """The time, once the device has finished the work queued on it (CUDA runs asynchronously)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


__all__ = ["Pace", "measure_pace", "pace_shape"]

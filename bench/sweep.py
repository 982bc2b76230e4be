"""Sweep suite: K configurations trained as one vectorized stack (`engine.training.train_stack`) against
the same K trained one after another (`engine.training.train`), and against one run alone.

The K configurations are a σ × C grid around the MNIST presets (same data, model, lot size and epochs;
seed 0, so the stack's lots are the lead's and the first member reproduces its separate run), for
logistic regression, Abadi et al.'s DP-PCA 60 + MLP 60→1000→10, the MLP 784→1000→10 and (on a GPU) the CNN. Each
mode trains from the same in-memory dataset with its plan made beforehand, so the figures are the
training itself: the loop (the last step record's `elapsed_s`, test evaluations included) and end to
end (the loop plus model set-up and each run's final ε by every accountant, the same work for both).
The modes run round-robin for `repetitions` rounds, the first mode rotating; a time is the median over rounds,
and a ratio the median of its per-round values (the two times of one round see the same machine), with its spread
and the self-check of `bench.timing`. The test split is cut to its first `test_examples` (every run evaluates
itself 100 times; that work is the same in both modes and is not what is compared). Without a copy of MNIST
(`DPLAB_DATA_DIR`) the suite runs on scikit-learn's digits instead, and says so.
"""

import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from bench.timing import ratio_summary, report_unstable
from engine.jobs.settings import default_data_dirs
from engine.training import (
    Dataset,
    DatasetError,
    StackMember,
    StepRecord,
    load_dataset,
    parse_spec,
    pick_device,
    plan_run,
    train,
    train_stack,
)
from engine.training.algorithms import dpsgd
from engine.training.trainers.stack import stack_run


@dataclass(frozen=True)
class Settings:
    members: int
    epochs: float
    repetitions: int
    models: tuple[str, ...]
    test_examples: int
    modes: tuple[str, ...] = ("one run", "sequential", "stack")  # of `run`'s modes, those timed


FULL = Settings(members=8, epochs=2.0, repetitions=3, models=("logreg", "mlp_pca60", "mlp"), test_examples=2000)
QUICK = Settings(members=8, epochs=0.5, repetitions=1, models=("logreg",), test_examples=1000)
GPU_MODELS = ("logreg", "mlp_pca60", "mlp", "cnn")
RATIOS = (  # (name, numerator, denominator) of times measured in the same round
    ("speed-up of the stack over sequential", "sequential", "stack"),
    ("stack time / one run's", "stack", "one run"),
    ("one run's time, graphed / eager", "one run", "one run, eager"),
    ("stack time, graphed / eager", "stack", "stack, eager"),
    ("stack time / one run's, both eager", "stack, eager", "one run, eager"),
)


def grid(members: int) -> list[tuple[float, float]]:
    """(σ, C) of each member: σ from 0.7 up and C alternating 0.5 / 1 / 2, all distinct."""
    return [(round(0.7 + 0.15 * k, 2), (0.5, 1.0, 2.0)[k % 3]) for k in range(members)]


def specs_for(model: str, dataset: str, members: int, epochs: float) -> list[dict]:
    """`model`: logreg, mlp (784→1000→10), mlp_pca60 (Abadi et al.'s DP-PCA 60 (σ_p 7) + 60→1000→10) or cnn."""
    base = {
        "dataset": dataset,
        "model": model,
        "algorithm": "dpsgd",
        "delta": 1e-5,
        "lot_size": 256,
        "epochs": epochs,
        "lr": 0.5 if model != "cnn" else 0.25,
        "seed": 0,
    }
    if model == "mlp_pca60":
        base.update(model="mlp", pca_dims=60, pca_noise=7.0)
    if base["model"] == "mlp":
        base["hidden"] = [1000]
    return [dict(base, noise_multiplier=sigma, clip_norm=c) for sigma, c in grid(members)]


def _dataset() -> tuple[str, Dataset]:
    try:
        return "mnist", load_dataset("mnist", default_data_dirs())
    except DatasetError as exc:
        print(f"sweep suite: no MNIST copy ({exc}); using digits", file=sys.stderr)
        return "digits", load_dataset("digits", [])


class LoopClock:
    """The loop time of a run: `elapsed_s` of its last step record."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, record: StepRecord) -> None:
        if record.elapsed_s is not None:
            self.seconds = record.elapsed_s


def _time_one(member: StackMember, data: Dataset) -> tuple[float, float]:
    clock = LoopClock()
    started = time.perf_counter()
    train(member.spec, plan=member.plan, dataset=data, on_step=clock)
    return clock.seconds, time.perf_counter() - started


def _time_one_eager(member: StackMember, data: Dataset) -> tuple[float, float]:
    """`_time_one` with the step's stages launched one kernel at a time even on a GPU (no `step_graph`)."""
    with eager_steps():
        return _time_one(member, data)


def _time_stack_eager(members: list[StackMember], data: Dataset) -> tuple[float, float]:
    with eager_steps():
        return _time_stack(members, data)


@contextlib.contextmanager
def eager_steps() -> Iterator[None]:
    """Runs and stacks trained meanwhile launch their stages one kernel at a time even on a GPU (no CUDA graph)."""
    real = dpsgd.step_graph_for, stack_run.stack_graph_for
    dpsgd.step_graph_for = stack_run.stack_graph_for = lambda *args, **kwargs: None
    try:
        yield
    finally:
        dpsgd.step_graph_for, stack_run.stack_graph_for = real


def _time_sequential(members: list[StackMember], data: Dataset) -> tuple[float, float]:
    loops, total = 0.0, 0.0
    for member in members:
        loop, wall = _time_one(member, data)
        loops, total = loops + loop, total + wall
    return loops, total


def _time_stack(members: list[StackMember], data: Dataset) -> tuple[float, float]:
    clock = LoopClock()
    started = time.perf_counter()
    train_stack(members, dataset=data, on_step=[clock] + [None] * (len(members) - 1))
    return clock.seconds, time.perf_counter() - started


def run(quick: bool, settings: Settings | None = None) -> list[dict]:
    settings = settings or (QUICK if quick else FULL)
    device = pick_device()
    dataset, data = _dataset()
    data = replace(data, x_test=data.x_test[: settings.test_examples], y_test=data.y_test[: settings.test_examples])
    models = GPU_MODELS if device.type == "cuda" and not quick and dataset == "mnist" else settings.models
    records: list[dict] = []
    for model in models:
        specs = [parse_spec(s) for s in specs_for(model, dataset, settings.members, settings.epochs)]
        members = [StackMember(spec=s, plan=plan_run(s, n_train=len(data.x_train))) for s in specs]
        _time_one(members[0], data)  # warm-up: first-call costs (kernels, allocator) out of the figures
        _time_stack(members[:2], data)
        every = {
            "one run": (_time_one, members[0]),
            "one run, eager": (_time_one_eager, members[0]),
            "sequential": (_time_sequential, members),
            "stack": (_time_stack, members),
            "stack, eager": (_time_stack_eager, members),
        }
        modes = {name: every[name] for name in settings.modes}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
        for rep in range(settings.repetitions):
            order = list(modes)[rep % len(modes) :] + list(modes)[: rep % len(modes)]
            for name in order:
                timer, what = modes[name]
                times[name].append(timer(what, data))
        label = (
            f"sweep {model} {dataset} K={settings.members} ({members[0].plan.steps} steps, "
            f"{len(data.x_test):,} test examples, {device.type})"
        )
        for part, index in (("loop", 0), ("end to end", 1)):
            median = {name: statistics.median(t[index] for t in values) for name, values in times.items()}
            for name, value in median.items():
                records.append({"name": f"{label}: {name}, {part}", "value": value, "unit": "s"})
            per_round = {
                name: [times[numerator][r][index] / times[denominator][r][index] for r in range(settings.repetitions)]
                for name, numerator, denominator in RATIOS
                if numerator in modes and denominator in modes
            }
            for name, numerator, denominator in RATIOS:
                if name not in per_round:
                    continue
                records.append(
                    {
                        "name": f"{label}: {name}, {part}",
                        **ratio_summary(per_round[name]),
                        "numerator": numerator,
                        "denominator": denominator,
                    }
                )
    report_unstable("sweep", records)
    return records

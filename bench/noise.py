"""Noise suite: what release mode costs per DP-SGD step against the reproducible lab mode.

One engine step (`trainer.make_step`: Poisson lot, book-keeping clipping, Gaussian noise, 1/L, SGD) of
logistic regression and of the MLP 64→128→10 on digits with lots of 256 (q = 256/1,438), on the CPU at one
thread. Release mode seeds a fresh generator from `secrets` for the lot and for every tensor and draws each
noise coordinate as four Gaussians, halved (`engine.training.noise`); the lab mode draws once from streams
seeded by the spec. The two modes run interleaved: a block of `block_steps` steps of one, then of the other
(the first mode alternating), `repetitions` times; a figure is the median time per step over the blocks, with
the spread (min and max) in the JSON record, and the ratio is the median over repetitions of release over lab
in the same repetition (paired blocks: a change of machine load between repetitions cancels).
"""

import statistics
import time
from dataclasses import dataclass

import torch

from engine.training import load_dataset, parse_spec, plan_spec
from engine.training.algorithms.optimizers import OptimizerName, make_optimizer
from engine.training.noise import random_streams
from engine.training.trainer import build_run_model, make_step

MODELS = {"logreg": {}, "mlp 64→128→10": {"model": "mlp", "hidden": [128]}}
MODES = ("reproducible", "release")
THREADS = 1


@dataclass(frozen=True, kw_only=True)
class Settings:
    repetitions: int
    block_steps: int
    warmup_steps: int = 5


FULL = Settings(repetitions=61, block_steps=20)
QUICK = Settings(repetitions=21, block_steps=20)


def spec_for(model: dict, noise: str):
    return parse_spec(
        {
            "dataset": "digits",
            "model": "logreg",
            "algorithm": "dpsgd",
            "delta": 1e-5,
            "clip_norm": 1.0,
            "noise_multiplier": 1.0,
            "lot_size": 256,
            "epochs": 100,
            "lr": 0.5,
            "seed": 0,
            "noise": noise,
        }
        | model
    )


def stepper(spec, data):
    """The engine's step function for `spec` on the CPU, with a step counter that cycles through the plan."""
    device = torch.device("cpu")
    plan = plan_spec(spec)
    x, y = torch.as_tensor(data.x_train), torch.as_tensor(data.y_train)
    torch.manual_seed(spec.seed)
    model = build_run_model(spec, n_features=x.shape[1], n_classes=data.n_classes, image_shape=data.image_shape)
    optimizer = make_optimizer(OptimizerName(spec.optimizer), list(model.parameters()), lr=spec.lr, momentum=None)
    step_once = make_step(spec, plan, model, optimizer, x, y, random_streams(spec, device))
    counter = iter(range(10**9))
    return lambda: step_once(next(counter) % plan.steps + 1)


def block_seconds(step, steps: int) -> float:
    """Seconds per step over a block of `steps` steps."""
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def run(quick: bool) -> list[dict]:
    settings = QUICK if quick else FULL
    data = load_dataset("digits")
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    records: list[dict] = []
    try:
        for label, model in MODELS.items():
            steps = {mode: stepper(spec_for(model, mode), data) for mode in MODES}
            for step in steps.values():
                block_seconds(step, settings.warmup_steps)
            times: dict[str, list[float]] = {mode: [] for mode in MODES}
            for rep in range(settings.repetitions):
                for mode in MODES[rep % 2 :] + MODES[: rep % 2]:  # interleaved, the first alternating
                    times[mode].append(block_seconds(steps[mode], settings.block_steps))
            name = f"noise: DP-SGD step, {label}, digits, lots of 256, CPU {THREADS} thread"
            median = {mode: statistics.median(t) for mode, t in times.items()}
            for mode, values in times.items():
                records.append(
                    {
                        "name": f"{name}: {mode} noise",
                        "value": median[mode] * 1e3,
                        "unit": "ms",
                        "min": min(values) * 1e3,
                        "max": max(values) * 1e3,
                        "blocks": len(values),
                        "steps_per_block": settings.block_steps,
                    }
                )
            ratios = [r / p for r, p in zip(times["release"], times["reproducible"], strict=True)]
            records.append(
                {
                    "name": f"{name}: release / reproducible",
                    "value": statistics.median(ratios),
                    "unit": "x",
                    "numerator": "release",
                    "denominator": "reproducible",
                    "min": min(ratios),
                    "max": max(ratios),
                }
            )
    finally:
        torch.set_num_threads(threads)
    return records

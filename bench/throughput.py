"""Step throughput: non-private SGD vs. this engine's DP-SGD step with each clipper.

For each (model, batch size) three modes run on the same fixed batch of random float32 data, each on
its own identically initialized model and `torch.optim.SGD` optimizer:

- ``nonprivate``: forward, mean cross-entropy, backward, ``optimizer.step()``;
- ``bookkeeping``: ``BookKeepingClipper.clipped_sum`` → ``add_gaussian_noise`` → ``scale`` → set ``.grad``
  → ``optimizer.step()`` (the engine's ``dpsgd_step`` chain, minus Poisson sampling and its diagnostics);
- ``materialized``: the same chain with ``MaterializedClipper`` (per-example gradients via ``torch.func``).

Timing: each mode is warmed up (3 steps, fewer when a step is slow), its block length N is calibrated
so that a block of N steps lasts about ``block_s``, then the modes are timed round-robin — one block
each per repetition, with the starting mode rotated — so machine noise hits all modes alike.
Repetitions are cut (not below 3) when a (model, batch) would otherwise run past ``config_budget_s``.
A mode's figure is the median over repetitions of N / (block wall time); ratios are ratios of those
medians (throughput ratios, so ``bookkeeping / nonprivate`` < 1 is the share of non-private
throughput kept and ``bookkeeping / materialized`` > 1 is the speedup of book-keeping over
materialized clipping). The min and max over repetitions go to the JSON records too.
"""

import copy
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.training import pick_device
from engine.training.algorithms.dpsgd import scale
from engine.training.clipping import BookKeepingClipper, MaterializedClipper
from engine.training.features.models import build_model
from engine.training.noise import add_gaussian_noise

N_FEATURES = 784
N_CLASSES = 10
IMAGE_SHAPE = (1, 28, 28)  # MNIST-sized images for the CNN: C·H·W = N_FEATURES
MODELS: list[tuple[str, str, dict[str, object]]] = [
    ("logreg", "logreg", {}),  # (label, build_model name, build_model keywords)
    ("mlp1000", "mlp", {"hidden": (1000,)}),
    ("cnn", "cnn", {"image_shape": IMAGE_SHAPE}),  # Tramèr & Boneh 2021's tanh CNN, 26k parameters
]
MODES = ("nonprivate", "bookkeeping", "materialized")
RATIOS = [("bookkeeping", "nonprivate"), ("materialized", "nonprivate"), ("bookkeeping", "materialized")]
CLIP_NORM = 1.0
NOISE_MULTIPLIER = 1.0
LR = 0.05
SEED = 0


@dataclass(frozen=True)
class Settings:
    batch_sizes: tuple[int, ...]
    repetitions: int
    block_s: float  # target wall time of one timed block
    warmup_steps: int = 3
    warmup_budget_s: float = 2.0  # stop warming up after this long (at least one step always runs)
    config_budget_s: float = 40.0  # cut repetitions (not below min_repetitions) to fit one (model, batch) in this
    min_repetitions: int = 3


FULL = Settings(batch_sizes=(256, 1024), repetitions=7, block_s=0.3)
QUICK = Settings(batch_sizes=(256,), repetitions=3, block_s=0.1, config_budget_s=15.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _nonprivate_step(model: nn.Module, x: Tensor, y: Tensor) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def _dp_step(
    clipper: BookKeepingClipper | MaterializedClipper, x: Tensor, y: Tensor, device: torch.device
) -> Callable[[], None]:
    optimizer = torch.optim.SGD(clipper.params, lr=LR)
    noise_generator = torch.Generator(device=device).manual_seed(SEED + 1)
    noise_std = NOISE_MULTIPLIER * CLIP_NORM
    inv_lot = 1.0 / len(x)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)  # as the engine's dpsgd_step does
        clipped = clipper.clipped_sum(x, y, CLIP_NORM)
        noisy = add_gaussian_noise(clipped.grads, noise_std, noise_generator)
        update = scale(noisy, inv_lot)
        for param, g in zip(clipper.params, update, strict=True):
            param.grad = g
        optimizer.step()

    return step


def _time_block(step: Callable[[], None], n: int, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(n):
        step()
    _sync(device)
    return time.perf_counter() - start


def _warm_up(step: Callable[[], None], settings: Settings, device: torch.device) -> float:
    """Run warm-up steps; return the wall time of the last one (a rough per-step estimate)."""
    spent, last = 0.0, 0.0
    for _ in range(settings.warmup_steps):
        last = _time_block(step, 1, device)
        spent += last
        if spent >= settings.warmup_budget_s:
            break
    return last


def _calibrate(
    step: Callable[[], None], estimate_s: float, settings: Settings, device: torch.device
) -> tuple[int, float]:
    """(steps per block, estimated block seconds) so that a block lasts about `block_s`.

    Fast steps are re-measured over a longer run than the single warm-up step."""
    if estimate_s < settings.block_s / 10:
        probe = max(1, int(settings.block_s / 10 / max(estimate_s, 1e-6)))
        estimate_s = _time_block(step, probe, device) / probe
    n = max(1, round(settings.block_s / max(estimate_s, 1e-9)))
    return n, n * estimate_s


def _measure(steps: dict[str, Callable[[], None]], settings: Settings, device: torch.device) -> dict[str, list[float]]:
    """Per mode, the steps/s of each repetition's block; modes interleaved round-robin."""
    block, rep_s = {}, 0.0
    for mode, step in steps.items():
        block[mode], block_s = _calibrate(step, _warm_up(step, settings, device), settings, device)
        rep_s += block_s
    reps = max(settings.min_repetitions, min(settings.repetitions, int(settings.config_budget_s / rep_s)))
    modes = list(steps)
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for rep in range(reps):
        for i in range(len(modes)):
            mode = modes[(rep + i) % len(modes)]
            rates[mode].append(block[mode] / _time_block(steps[mode], block[mode], device))
    return rates


def _record(name: str, value: float, unit: str, **extra: object) -> dict:
    return {"name": name, "value": value, "unit": unit, **extra}


def run(quick: bool = False) -> list[dict]:
    settings = QUICK if quick else FULL
    device = pick_device()
    records: list[dict] = []
    for label, model_name, options in MODELS:
        for batch in settings.batch_sizes:
            torch.manual_seed(SEED)
            base = build_model(model_name, n_features=N_FEATURES, n_classes=N_CLASSES, **options).to(device)
            x = torch.randn(batch, N_FEATURES, device=device, dtype=torch.float32)
            y = torch.randint(0, N_CLASSES, (batch,), device=device)
            steps = {
                "nonprivate": _nonprivate_step(copy.deepcopy(base), x, y),
                "bookkeeping": _dp_step(BookKeepingClipper(copy.deepcopy(base)), x, y, device),
                "materialized": _dp_step(MaterializedClipper(copy.deepcopy(base)), x, y, device),
            }
            print(f"[throughput] {label} batch={batch} ...", file=sys.stderr, flush=True)
            rates = _measure(steps, settings, device)
            prefix = f"throughput/{label}/b{batch}"
            median = {mode: statistics.median(r) for mode, r in rates.items()}
            for mode in MODES:
                r = rates[mode]
                records.append(
                    _record(f"{prefix}/{mode}", median[mode], "steps/s", min=min(r), max=max(r), repetitions=len(r))
                )
            for num, den in RATIOS:
                records.append(
                    _record(
                        f"{prefix}/{num}_vs_{den}",
                        median[num] / median[den],
                        "x",
                        numerator=f"{prefix}/{num}",
                        denominator=f"{prefix}/{den}",
                    )
                )
            del steps, base, x, y
    return records

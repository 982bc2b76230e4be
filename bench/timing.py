"""The one timing harness of the speed suites (`throughput`, `opacus`, `noise`; `sweep` reads its ratios per round
with `ratio_summary`): throughput ratios measured pair by pair.

A suite hands over its modes (a step function each) and the ratios it wants, as (numerator, denominator) pairs of
modes. Every mode is warmed up, then its block length is calibrated: the number of steps that lasts about
`block_s`, long enough that a scheduler's slice or a neighbour's burst is a small share of a block. Then come
`pairs` repetitions; in each, every ratio times one block of its denominator and one of its numerator,
back to back and in alternating order (AB, then BA), so both sides of the ratio see the same second of the
machine. Each repetition gives that ratio one value: numerator steps/s over denominator steps/s.

A ratio's figure is the median of its per-pair values, reported with their min, max and **spread**: half the
distance between the 10th and 90th percentiles, relative to the median (±%). The **self-check** flags a ratio
whose spread exceeds `STABLE_WITHIN` (±10%): its repeated pairs disagree, so the figure cannot steer anything
until it is rerun on a quieter machine. Every record carries `stable`; `unstable(records)` lists the flagged.
"""

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

STABLE_WITHIN = 0.10  # a ratio's spread (±, relative to its median) above this is flagged

Step = Callable[[], None]


@dataclass(frozen=True, kw_only=True)
class Timing:
    block_s: float  # target wall time of one timed block
    pairs: int  # repetitions: each ratio is measured this many times
    warmup_steps: int = 3
    warmup_budget_s: float = 2.0  # stop warming a mode up after this long (one step always runs)
    budget_s: float = 90.0  # cut the repetitions (not below `min_pairs`) to fit one case in this
    min_pairs: int = 5


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_block(step: Step, n: int, device: torch.device) -> float:
    """Wall time of `n` steps, the device drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(n):
        step()
    synchronize(device)
    return time.perf_counter() - start


def block_length(step: Step, timing: Timing, device: torch.device) -> int:
    """Steps per block, so that a block lasts about `block_s` (after warming the step up)."""
    spent, last = 0.0, 0.0
    for _ in range(timing.warmup_steps):
        last = time_block(step, 1, device)
        spent += last
        if spent >= timing.warmup_budget_s:
            break
    if last < timing.block_s / 10:  # a fast step: measure it over a longer run than one step
        probe = max(1, int(timing.block_s / 10 / max(last, 1e-6)))
        last = time_block(step, probe, device) / probe
    return max(1, round(timing.block_s / max(last, 1e-9)))


@dataclass(frozen=True)
class Measured:
    """Per mode, its steps/s in every block timed; per ratio, its per-pair values."""

    rates: dict[str, list[float]]
    ratios: dict[tuple[str, str], list[float]]


def measure(
    steps: dict[str, Step], ratios: Sequence[tuple[str, str]], timing: Timing, device: torch.device
) -> Measured:
    """Time every ratio of `ratios` pair by pair (see the module's docstring)."""
    blocks = {mode: block_length(step, timing, device) for mode, step in steps.items()}
    repetition_s = 2 * timing.block_s * len(ratios)
    repetitions = max(timing.min_pairs, min(timing.pairs, int(timing.budget_s / max(repetition_s, 1e-9))))
    rates: dict[str, list[float]] = {mode: [] for mode in steps}
    values: dict[tuple[str, str], list[float]] = {pair: [] for pair in ratios}
    for repetition in range(repetitions):
        for numerator, denominator in ratios:
            order = (denominator, numerator) if repetition % 2 == 0 else (numerator, denominator)
            rate = {}
            for mode in order:
                rate[mode] = blocks[mode] / time_block(steps[mode], blocks[mode], device)
                rates[mode].append(rate[mode])
            values[(numerator, denominator)].append(rate[numerator] / rate[denominator])
    return Measured(rates=rates, ratios=values)


def spread(values: Sequence[float]) -> float:
    """Half the 10th–90th percentile range, relative to the median (0.05: ±5%)."""
    low, high = np.percentile(values, [10, 90])
    return float((high - low) / 2 / statistics.median(values))


def rate_record(name: str, rates: Sequence[float]) -> dict:
    return {
        "name": name,
        "value": statistics.median(rates),
        "unit": "steps/s",
        "min": min(rates),
        "max": max(rates),
        "blocks": len(rates),
    }


def ratio_summary(values: Sequence[float]) -> dict:
    """A ratio's figure from its per-pair values: their median, min, max and spread, and the self-check."""
    spread_value = spread(values)
    return {
        "value": statistics.median(values),
        "unit": "x",
        "min": min(values),
        "max": max(values),
        "spread": spread_value,
        "pairs": len(values),
        "stable": spread_value <= STABLE_WITHIN,
        "compared": f"±{spread_value:.0%} over {len(values)} pairs" + ("" if spread_value <= STABLE_WITHIN else " ⚠"),
    }


def ratio_record(prefix: str, numerator: str, denominator: str, values: Sequence[float], **extra: object) -> dict:
    """A ratio's record: its name, what it divides, and `ratio_summary` of its per-pair values."""
    return {
        "name": f"{prefix}/{numerator}_vs_{denominator}",
        **ratio_summary(values),
        "numerator": f"{prefix}/{numerator}",
        "denominator": f"{prefix}/{denominator}",
        **extra,
    }


def unstable(records: Sequence[dict]) -> list[str]:
    """The ratios the self-check flags (spread above `STABLE_WITHIN`)."""
    return [r["name"] for r in records if r.get("unit") == "x" and r.get("stable") is False]


def report_unstable(suite: str, records: Sequence[dict]) -> None:
    if flagged := unstable(records):
        print(
            f"[{suite}] self-check: {len(flagged)} ratio(s) vary by more than ±{STABLE_WITHIN:.0%} between pairs "
            f"(rerun on a quieter machine): {', '.join(flagged)}",
            file=sys.stderr,
        )

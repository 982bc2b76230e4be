"""Accountant suite: the cost of ε curves and σ calibration (no torch involved)."""

import statistics
import time

import numpy as np

from engine.privacy import calibrate_noise_multiplier, dpsgd_step_event, rdp_epsilon_curve, single_phase
from engine.privacy.accountants import pld


def _median_seconds(work, repetitions: int) -> float:
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(quick: bool = False) -> list[dict]:
    repetitions = 3 if quick else 7
    step = dpsgd_step_event(sampling_rate=256 / 60_000, noise_multiplier=1.1)
    curve_s = _median_seconds(lambda: rdp_epsilon_curve(step, steps=10_000, delta=1e-5), repetitions)
    calibrate_s = _median_seconds(
        lambda: calibrate_noise_multiplier(target_epsilon=3.0, delta=1e-5, sampling_rate=64 / 1438, steps=450),
        repetitions,
    )
    calibrate_pld_s = _median_seconds(
        lambda: calibrate_noise_multiplier(
            target_epsilon=3.0, delta=1e-5, sampling_rate=64 / 1438, steps=450, accountant_name="pld"
        ),
        1 if quick else 3,
    )
    ledger = single_phase(step, 10_000)
    points = 20 if quick else 100
    grid = np.linspace(10_000 / points, 10_000, points).round().astype(int)  # evenly spaced, as a chart needs
    pld_s = _median_seconds(lambda: pld.curve(ledger, delta=1e-5, steps=grid), 1)
    return [
        {"name": "accounting/rdp_curve_10000_steps", "value": curve_s, "unit": "s"},
        {"name": f"accounting/pld_grid_{len(grid)}_points_of_10000_steps", "value": pld_s, "unit": "s"},
        {"name": "accounting/calibrate_sigma_rdp", "value": calibrate_s, "unit": "s"},
        {"name": "accounting/calibrate_sigma_pld", "value": calibrate_pld_s, "unit": "s"},
    ]

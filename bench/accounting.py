"""Accountant suite: the cost of ε curves and σ calibration (no torch involved)."""

import statistics
import time

from engine.privacy import calibrate_noise_multiplier, dpsgd_step_event, rdp_epsilon_curve


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
    return [
        {"name": "accounting/rdp_curve_10000_steps", "value": curve_s, "unit": "s"},
        {"name": "accounting/calibrate_sigma_rdp", "value": calibrate_s, "unit": "s"},
    ]

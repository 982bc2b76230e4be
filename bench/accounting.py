"""Accountant suite: the cost of ε curves and σ calibration, and the tightness figures of
`accounting_tightness` (no torch involved)."""

import statistics
import time

import numpy as np
from dp_accounting import calibrate_dp_mechanism, dp_event
from dp_accounting.mechanism_calibration import ExplicitBracketInterval
from dp_accounting.rdp import rdp_privacy_accountant as rdp_accountant

from bench import accounting_tightness
from engine.privacy import calibrate_noise_multiplier, dpsgd_step_event, rdp_epsilon_curve, single_phase
from engine.privacy.accountants import pld, rdp
from engine.privacy.calibration import SIGMA_MAX, SIGMA_MIN


def _median_seconds(work, repetitions: int) -> float:
    times = []
    for _ in range(repetitions):
        rdp._release_rdp.cache_clear()  # every repetition computes, as a new run's first calibration does
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _library_calibration(target: float, delta: float, q: float, steps: int) -> float:
    """dp_accounting's own calibration, as the engine did before its two-stage search."""
    return calibrate_dp_mechanism(
        lambda: rdp_accountant.RdpAccountant(),
        lambda s: dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), steps),
        target,
        delta,
        ExplicitBracketInterval(SIGMA_MIN, SIGMA_MAX),
        tol=1e-4 * SIGMA_MIN,
    )


def run(quick: bool = False) -> list[dict]:
    repetitions = 3 if quick else 7
    step = dpsgd_step_event(sampling_rate=256 / 60_000, noise_multiplier=1.1)
    curve_s = _median_seconds(lambda: rdp_epsilon_curve(step, steps=10_000, delta=1e-5), repetitions)
    calibrate_s = _median_seconds(
        lambda: calibrate_noise_multiplier(target_epsilon=3.0, delta=1e-5, sampling_rate=64 / 1438, steps=450),
        repetitions,
    )
    library_s = _median_seconds(lambda: _library_calibration(3.0, 1e-5, 64 / 1438, 450), repetitions)
    short_s = _median_seconds(
        lambda: calibrate_noise_multiplier(target_epsilon=3.0, delta=1e-5, sampling_rate=64 / 1438, steps=11),
        repetitions,
    )
    short_library_s = _median_seconds(lambda: _library_calibration(3.0, 1e-5, 64 / 1438, 11), repetitions)
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
        {
            "name": "accounting/calibrate_sigma_rdp_vs_dp_accounting",
            "value": library_s / calibrate_s,
            "unit": "×",
            "numerator": "dp_accounting.calibrate_dp_mechanism (RDP, all orders, [0.05, 500])",
            "denominator": "this engine's two-stage RDP calibration",
            "steps": 450,
        },
        {"name": "accounting/calibrate_sigma_rdp_11_steps", "value": short_s, "unit": "s"},
        {
            "name": "accounting/calibrate_sigma_rdp_11_steps_vs_dp_accounting",
            "value": short_library_s / short_s,
            "unit": "×",
            "numerator": "dp_accounting.calibrate_dp_mechanism",
            "denominator": "this engine",
            "steps": 11,
        },
        {"name": "accounting/calibrate_sigma_pld", "value": calibrate_pld_s, "unit": "s"},
        *accounting_tightness.run(quick),
    ]

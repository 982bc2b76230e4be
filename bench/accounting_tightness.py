"""Accountant tightness and its cost, part of the `accounting` suite: the adaptive PLD discretization
against the fixed 1e-3 grid (time and ε), the advanced-composition curve over 10,000 steps, the exact optimal
composition of pure releases, and calibration by PLD against RDP. No torch involved."""

import math
import statistics
import time
from collections.abc import Callable

from engine.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    dpsgd_step_event,
    exponential_mechanism_event,
    final_epsilon,
    single_phase,
)
from engine.privacy.accountants import composition, optimal_pure, pld, rdp

DELTA = 1e-5
LEDGERS = {
    "small_steps_q0.01_sigma8_1000_steps": single_phase(
        dpsgd_step_event(sampling_rate=0.01, noise_multiplier=8.0), 1000
    ),
    "dpsgd_q256of60000_sigma1.1_10000_steps": single_phase(
        dpsgd_step_event(sampling_rate=256 / 60_000, noise_multiplier=1.1), 10_000
    ),
}


def _timed(work: Callable[[], object], repetitions: int, before: Callable[[], None] = lambda: None) -> dict:
    """Median seconds of `work` over `repetitions`, with the spread (min, max)."""
    times = []
    for _ in range(repetitions):
        before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return {
        "value": statistics.median(times),
        "unit": "s",
        "spread": [min(times), max(times)],
        "repetitions": repetitions,
    }


def _pld_records(name: str, ledger: PrivacyLedger, repetitions: int) -> list[dict]:
    adaptive, chosen = pld.adaptive_epsilon(ledger, delta=DELTA)
    fixed = pld.epsilon_of(ledger, delta=DELTA, discretization=pld.GRID_DISCRETIZATION)
    fine = pld.epsilon_of(ledger, delta=DELTA, discretization=1e-4)
    prefix = f"accounting/pld_{name}"
    return [
        {
            "name": f"{prefix}_final_seconds_adaptive",
            "discretization": chosen,
            **_timed(lambda: pld.epsilon_of(ledger, delta=DELTA), repetitions),
        },
        {
            "name": f"{prefix}_final_seconds_fixed_1e-3",
            **_timed(lambda: pld.epsilon_of(ledger, delta=DELTA, discretization=pld.GRID_DISCRETIZATION), repetitions),
        },
        {"name": f"{prefix}_epsilon_adaptive", "value": adaptive, "unit": "ε", "discretization": chosen},
        {"name": f"{prefix}_epsilon_fixed_1e-3", "value": fixed, "unit": "ε"},
        {"name": f"{prefix}_epsilon_grid_1e-4", "value": fine, "unit": "ε"},
        {
            "name": f"{prefix}_adaptive_over_grid_1e-4",
            "value": adaptive / fine,
            "unit": "×",
            "numerator": "adaptive PLD",
            "denominator": "PLD at a 1e-4 grid",
        },
    ]


def run(quick: bool = False) -> list[dict]:
    repetitions = 3 if quick else 5
    records: list[dict] = []
    for name, ledger in LEDGERS.items():
        records += _pld_records(name, ledger, repetitions)

    ledger = LEDGERS["dpsgd_q256of60000_sigma1.1_10000_steps"]
    grid = pld.grid(ledger.steps)
    records += [
        {
            "name": f"accounting/pld_curve_{len(grid)}_points_of_10000_steps_adaptive",
            **_timed(lambda: pld.curve(ledger, delta=DELTA, steps=grid), 1),
        },
        {
            "name": f"accounting/pld_curve_{len(grid)}_points_of_10000_steps_fixed_1e-3",
            **_timed(lambda: pld.curve(ledger, delta=DELTA, steps=grid, discretization=pld.GRID_DISCRETIZATION), 1),
        },
    ]
    records.append(
        {
            "name": "accounting/advanced_curve_10000_steps_first_call",
            **_timed(
                lambda: composition.advanced_curve(ledger, delta=DELTA),
                repetitions,
                before=composition.delta_profile.cache_clear,
            ),
        }
    )
    records.append(
        {
            "name": "accounting/advanced_curve_10000_steps_cached_profile",
            **_timed(lambda: composition.advanced_curve(ledger, delta=DELTA), repetitions),
        }
    )

    # RWM at ε = 1 over 1,000 rounds (D&R Thm 11.2): each round 2η-DP with η = ε/√(32 T ln(1/δ)).
    rwm = single_phase(exponential_mechanism_event(epsilon=2 / math.sqrt(32 * 1000 * math.log(1 / DELTA))), 1000)
    exact = optimal_pure.curve(rwm, delta=DELTA, steps=[rwm.steps]).final_epsilon
    by_rdp = rdp.curve(rwm, delta=DELTA, steps=[rwm.steps]).final_epsilon
    records += [
        {
            "name": "accounting/optimal_pure_final_1000_rounds",
            **_timed(lambda: optimal_pure.curve(rwm, delta=DELTA, steps=[rwm.steps]), repetitions),
        },
        {
            "name": "accounting/optimal_pure_curve_every_step_of_1000_rounds",
            **_timed(lambda: optimal_pure.curve(rwm, delta=DELTA), 1),
        },
        {
            "name": "accounting/pure_1000_rounds_rdp_over_optimal",
            "unit": "×",
            "numerator": "RDP",
            "denominator": "optimal composition",
            "value": by_rdp / exact,
        },
        {
            "name": "accounting/pure_1000_rounds_pld_fixed_1e-3_over_optimal",
            "unit": "×",
            "numerator": "PLD at 1e-3",
            "denominator": "optimal composition",
            "value": pld.epsilon_of(rwm, delta=DELTA, discretization=pld.GRID_DISCRETIZATION) / exact,
        },
    ]

    # Calibration, digits DP-SGD: N = 1438, lots of 64, 20 epochs (450 steps), ε = 3.
    kwargs = dict(target_epsilon=3.0, delta=DELTA, sampling_rate=64 / 1438, steps=450)
    sigmas = {name: calibrate_noise_multiplier(**kwargs, accountant_name=name) for name in ("rdp", "pld")}
    spent = final_epsilon(
        single_phase(dpsgd_step_event(sampling_rate=64 / 1438, noise_multiplier=sigmas["pld"]), 450),
        delta=DELTA,
        accountant_name="pld",
    )
    records += [
        {
            "name": "accounting/calibrate_sigma_pld_digits_20_epochs",
            **_timed(lambda: calibrate_noise_multiplier(**kwargs, accountant_name="pld"), 1 if quick else 3),
        },
        {
            "name": "accounting/sigma_pld_over_rdp_digits_20_epochs",
            "value": sigmas["pld"] / sigmas["rdp"],
            "unit": "×",
            "numerator": f"σ by PLD ({sigmas['pld']:.4f})",
            "denominator": f"σ by RDP ({sigmas['rdp']:.4f})",
        },
        {"name": "accounting/pld_calibrated_epsilon_spent_of_3", "value": spent, "unit": "ε"},
    ]
    return records

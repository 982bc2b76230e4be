"""The privacy ledger equals dp-accounting's answers for the same events."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.privacy import (
    DEFAULT_ORDERS,
    PrivacyError,
    UnreachableTargetError,
    calibrate_noise_multiplier,
    dpsgd_event,
    dpsgd_step_event,
    rdp_epsilon,
    rdp_epsilon_curve,
)


def reference_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return RdpAccountant(orders=list(DEFAULT_ORDERS)).compose(event).get_epsilon(delta)


@settings(max_examples=8, deadline=None)
@given(
    q=st.floats(1e-4, 0.5),
    sigma=st.floats(0.5, 20.0),
    delta=st.sampled_from([1e-7, 1e-6, 1e-5, 1e-3]),
)
def test_curve_equals_dp_accounting_at_every_queried_step(q, sigma, delta):
    steps = 3000
    curve = rdp_epsilon_curve(dpsgd_step_event(sampling_rate=q, noise_multiplier=sigma), steps=steps, delta=delta)
    assert curve.epsilons.shape == (steps,)
    for t in (1, 500, steps):
        expected = reference_epsilon(q, sigma, t, delta)
        # Same formula, vectorized: agreement to floating-point rounding.
        assert curve.epsilons[t - 1] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert np.all(np.diff(curve.epsilons) >= -1e-12), "ε never decreases as steps are added"


def test_curve_of_10000_steps_matches_whole_event():
    step = dpsgd_step_event(sampling_rate=256 / 60000, noise_multiplier=1.1)
    curve = rdp_epsilon_curve(step, steps=10_000, delta=1e-5)
    eps, order = rdp_epsilon(dpsgd_event(sampling_rate=256 / 60000, noise_multiplier=1.1, steps=10_000), delta=1e-5)
    assert curve.final_epsilon == pytest.approx(eps, rel=1e-9)
    assert curve.final_order == order


def test_edge_order_is_flagged():
    # One heavily noised, rarely sampled release: the best order is the largest one searched, so a
    # longer order list could give a smaller ε and the user must be told.
    curve = rdp_epsilon_curve(dpsgd_step_event(sampling_rate=0.001, noise_multiplier=50.0), steps=1, delta=1e-10)
    assert curve.order_at_edge
    assert curve.final_order == DEFAULT_ORDERS[-1]
    healthy = rdp_epsilon_curve(dpsgd_step_event(sampling_rate=0.01, noise_multiplier=1.1), steps=1000, delta=1e-5)
    assert not healthy.order_at_edge


@pytest.mark.parametrize(
    ("target", "q", "steps", "delta"),
    [
        (3.0, 64 / 1438, 450, 1e-5),
        (1.0, 0.01, 1000, 1e-5),
        (8.0, 600 / 60000, 1000, 1e-5),
        (0.5, 0.004, 5000, 1e-6),
        # few steps and large ε: the best RDP order is fractional, the calibration's second stage
        (3.0, 64 / 1438, 11, 1e-5),
        (20.0, 0.1, 50, 1e-5),
        (50.0, 1.0, 3, 1e-5),
    ],
)
def test_calibrated_sigma_meets_target_and_matches_dp_accounting(target, q, steps, delta):
    from dp_accounting import calibrate_dp_mechanism

    sigma = calibrate_noise_multiplier(target_epsilon=target, delta=delta, sampling_rate=q, steps=steps)
    assert reference_epsilon(q, sigma, steps, delta) <= target
    # Tight: 0.1% less noise would overspend the budget.
    assert reference_epsilon(q, sigma * 0.999, steps, delta) > target
    expected = calibrate_dp_mechanism(
        lambda: RdpAccountant(orders=list(DEFAULT_ORDERS)),
        lambda s: dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), steps),
        target,
        delta,
    )
    assert sigma == pytest.approx(expected, rel=1e-3)


def test_unreachable_target_is_a_named_error():
    with pytest.raises(UnreachableTargetError, match=r"target_epsilon=0\.01 is unreachable"):
        calibrate_noise_multiplier(target_epsilon=0.01, delta=1e-9, sampling_rate=1.0, steps=100_000)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sampling_rate": 0.0, "noise_multiplier": 1.0}, "sampling_rate"),
        ({"sampling_rate": 1.5, "noise_multiplier": 1.0}, "sampling_rate"),
        ({"sampling_rate": 0.1, "noise_multiplier": 0.0}, "noise_multiplier"),
    ],
)
def test_invalid_events_are_refused(kwargs, field):
    with pytest.raises(PrivacyError, match=field):
        dpsgd_step_event(**kwargs)


def test_epsilon_grows_with_steps_and_shrinks_with_noise():
    def eps(sigma, steps):
        return rdp_epsilon(dpsgd_event(sampling_rate=0.01, noise_multiplier=sigma, steps=steps), delta=1e-5)[0]

    assert eps(1.0, 100) < eps(1.0, 1000)
    assert eps(2.0, 1000) < eps(1.0, 1000)
    assert math.isfinite(eps(0.5, 10_000))


def test_a_bound_with_no_finite_value_reads_as_infinity_in_the_statement():
    """The composition theorems overflow to the largest float on long runs; people must read ∞, not 1.8e+308."""
    from engine.privacy import EpsilonCurve, Panel, epsilon_text, privacy_statement, single_phase

    ledger = single_phase(dpsgd_step_event(sampling_rate=0.01, noise_multiplier=1.0), 10)
    curves = {
        name: EpsilonCurve(accountant=name, delta=1e-5, steps=np.array([10]), epsilons=np.array([value]))
        for name, value in [("rdp", 0.5), ("naive", np.finfo(float).max), ("advanced", math.inf)]
    }
    lines = privacy_statement(
        ledger=ledger, panel=Panel(delta=1e-5, curves=curves, not_applicable={}), dataset_size=1000, lot_size=10
    ).lines
    assert "(kε, kδ) ∞, Advanced composition ∞" in lines[0] and "e+308" not in lines[0] and "inf" not in lines[0]
    assert [epsilon_text(v) for v in (0.5, 1e300, math.inf, math.nan)] == ["0.5", "∞", "∞", "∞"]

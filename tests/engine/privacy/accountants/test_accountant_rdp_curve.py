"""The RDP curve at every step equals dp-accounting's RDP ε of the ledger truncated there.

The reference is built independently of the engine: a `dp_accounting.rdp.RdpAccountant` composes each
release's event, one occurrence at a time, and `compute_epsilon` converts. dp-accounting has no event for an
arbitrary ε-DP mechanism, so a `PureDpEvent` adds its RDP (α, min(ε, αε²/2)) (Mironov 2017, Prop. 3; Bun &
Steinke 2016, Prop. 1.4) to the accountant's RDP vector by hand.

Tolerance: both sides add at most 20 RDP vectors in a different order, so each order's RDP differs by at most
20 rounding errors of its magnitude, and at the best order the RDP is at most ε + |ln(δα)|/(α − 1) ≤ ε + 25.
An absolute slack of 1e-12·(1 + ε) covers that (≈ 20·2⁻⁵³·(ε + 25) ≤ 6e-14·(1 + ε)); the relative 1e-9
required of every displayed RDP ε is checked on top.
"""

import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant, compute_epsilon
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.privacy import (
    DEFAULT_ORDERS,
    PrivacyLedger,
    PureDpEvent,
    Release,
    dpsgd_step_event,
    exponential_mechanism_event,
    gaussian_event,
    laplace_event,
    rdp_curve,
    schedule,
)

ORDERS = np.asarray(RdpAccountant().orders, dtype=np.float64)


def slack(epsilon: float) -> float:
    return 1e-12 * (1.0 + epsilon) if np.isfinite(epsilon) else 0.0


def pure_rdp(epsilon: float) -> np.ndarray:
    return np.minimum(epsilon, ORDERS * epsilon**2 / 2)


def reference_curve(ledger: PrivacyLedger, delta: float) -> np.ndarray:
    """dp-accounting's ε after 0, 1, ..., T steps, composing one occurrence at a time."""
    accountant, extra = RdpAccountant(), np.zeros_like(ORDERS)

    def charge(event) -> None:
        nonlocal extra
        if isinstance(event, PureDpEvent):
            extra = extra + pure_rdp(event.epsilon)
        else:
            accountant.compose(event)

    def epsilon() -> float:
        return float(compute_epsilon(ORDERS, np.asarray(accountant.rdp) + extra, delta)[0])

    for release in ledger.upfront:
        for _ in range(release.count):
            charge(release.event)
    epsilons = [epsilon()]
    for phase in ledger.phases:
        for _ in range(phase.count):
            charge(phase.event)
            epsilons.append(epsilon())
    return np.asarray(epsilons)


def assert_equal_to_reference(ledger: PrivacyLedger, delta: float) -> None:
    steps = np.arange(ledger.steps + 1)
    ours = rdp_curve(ledger, delta=delta, steps=steps).epsilons
    reference = reference_curve(ledger, delta)
    assert np.array_equal(np.isinf(ours), np.isinf(reference)), (ours, reference)
    for got, want in zip(ours, reference, strict=True):
        if np.isfinite(want):
            assert got == pytest.approx(want, rel=1e-9, abs=slack(want))
            assert got >= want - slack(want), "the curve is below dp-accounting's ε"


def test_the_reference_uses_the_engine_orders():
    assert np.array_equal(ORDERS, np.asarray(DEFAULT_ORDERS))


SIGMA = st.floats(0.3, 50.0)
PHASE = st.tuples(st.floats(1e-4, 1.0), SIGMA, st.integers(1, 3))
UPFRONT = st.one_of(
    SIGMA.map(lambda s: gaussian_event(noise_multiplier=s)),
    st.floats(0.05, 50.0).map(lambda b: laplace_event(scale=b)),
    st.floats(0.01, 5.0).map(lambda e: exponential_mechanism_event(epsilon=e)),
)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    phases=st.lists(PHASE, min_size=1, max_size=4),
    upfront=st.lists(UPFRONT, max_size=3),
    delta=st.floats(1e-10, 1e-2),
)
# A schedule (q = 64/1438, σ = 1.0 then 0.6): phase 2 is ∞ at low orders, and its count 0 before it
# starts made 0 × ∞ = NaN, read as 0, so ε read 0 until step 4 (here) or 101 (with 100 steps a phase).
@example(phases=[(64 / 1438, 1.0, 3), (64 / 1438, 0.6, 3)], upfront=[], delta=1e-5)
@example(phases=[(0.3, 0.3, 2), (1.0, 0.3, 1)], upfront=[exponential_mechanism_event(epsilon=1.0)], delta=1e-6)
def test_rdp_curve_equals_dp_accounting_on_every_truncated_ledger(phases, upfront, delta):
    ledger = schedule([(dpsgd_step_event(sampling_rate=q, noise_multiplier=s), n) for q, s, n in phases])
    ledger = PrivacyLedger(phases=ledger.phases, upfront=tuple(Release(event=e, label="up front") for e in upfront))
    assert_equal_to_reference(ledger, delta)


def test_a_schedule_whose_later_phase_is_unbounded_at_low_orders_reads_its_truncated_epsilon_at_step_100():
    q = 64 / 1438
    ledger = schedule(
        [
            (dpsgd_step_event(sampling_rate=q, noise_multiplier=1.0), 100),
            (dpsgd_step_event(sampling_rate=q, noise_multiplier=0.6), 100),
        ]
    )
    curve = rdp_curve(ledger, delta=1e-5, steps=[50, 100, 101, 200])
    truncated = [RdpAccountant().compose(ledger.truncated(t).dp_event()).get_epsilon(1e-5) for t in (50, 100)]
    assert curve.epsilons[:2] == pytest.approx(truncated, rel=1e-9)
    assert curve.epsilons[1] == pytest.approx(3.623, abs=1e-3)  # dp-accounting's value for the truncated ledger
    assert np.all(np.diff(curve.epsilons) > 0)

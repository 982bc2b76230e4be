"""The exact optimal composition of pure ε-DP releases (Kairouz, Oh & Viswanath 2015; Murtagh & Vadhan 2016)
against a brute-force enumeration and the KOV closed form."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.special import comb

from engine.privacy import (
    NotApplicableError,
    PrivacyLedger,
    Release,
    dpsgd_step_event,
    exponential_mechanism_event,
    gaussian_event,
    laplace_event,
    panel,
    single_phase,
)
from engine.privacy.accountants import ACCOUNTANTS, optimal_pure


def brute_force_delta(epsilons: list[float], epsilon: float) -> float:
    """δ(ε) of composing randomized responses, summed over all 2^k sign patterns (k ≤ 12)."""
    total = 0.0
    for signs in itertools.product((1, -1), repeat=len(epsilons)):
        loss = sum(s * e for s, e in zip(signs, epsilons, strict=True))
        probability = math.prod(1 / (1 + math.exp(-s * e)) for s, e in zip(signs, epsilons, strict=True))
        total += probability * max(0.0, -math.expm1(epsilon - loss))
    return total


def pure_ledger(epsilons: list[float], laplace_scales: list[float] = ()) -> PrivacyLedger:
    """Each ε as one step (exponential mechanism), the Laplace releases up front."""
    return PrivacyLedger(
        phases=tuple(Release(event=exponential_mechanism_event(epsilon=e)) for e in epsilons),
        upfront=tuple(Release(event=laplace_event(scale=b)) for b in laplace_scales),
    )


def assert_smallest_valid(epsilons: list[float], got: float, delta: float) -> None:
    """δ(got) ≤ δ (valid) and δ(got − 1e-9) > δ (the smallest to 1e-9), by brute force.

    Slack: the brute-force sum of ≤ 4096 terms is accurate to ~1e-12 relative; the accountant rounds up by at
    most its own rounding bound plus 1e-12(1 + ε) (a few ulps), far below the 1e-9 probe."""
    assert brute_force_delta(epsilons, got) <= delta * (1 + 1e-12)
    if got > 1e-9:
        assert brute_force_delta(epsilons, got - 1e-9) > delta


@settings(max_examples=30, deadline=None)
@given(
    epsilons=st.lists(st.floats(0.01, 2.0), min_size=1, max_size=8),
    scales=st.lists(st.floats(0.5, 20.0), max_size=2),
    delta=st.floats(1e-8, 0.3),
)
@example(epsilons=[0.3, 0.1, 0.1, 0.5, 0.05, 1.5, 0.01, 0.7], scales=[2.0, 10.0], delta=1e-6)
def test_equals_brute_force_enumeration(epsilons, scales, delta):
    ledger = pure_ledger(epsilons, scales)
    curve = optimal_pure.curve(ledger, delta=delta, steps=np.arange(len(epsilons) + 1))
    laplace = [1 / b for b in scales]
    for t, got in enumerate(curve.epsilons):
        assert_smallest_valid(laplace + epsilons[:t], float(got), delta)


@pytest.mark.parametrize(("k", "eps0"), [(10, 0.1), (25, 0.5), (200, 0.05)])
def test_equals_the_kov_closed_form(k, eps0):
    # Kairouz, Oh & Viswanath 2015, Thm 3.3: k-fold ε₀-DP is ((k − 2i)ε₀, δᵢ)-DP with
    # δᵢ = Σ_{j<i} C(k, j)(e^{(k−j)ε₀} − e^{(k−2i+j)ε₀}) / (1 + e^{ε₀})^k, and no smaller ε holds at δᵢ.
    ledger = single_phase(exponential_mechanism_event(epsilon=eps0), k)
    checked = 0
    for i in range(1, k // 2):
        numerator = sum(
            comb(k, j, exact=True) * (math.exp((k - j) * eps0) - math.exp((k - 2 * i + j) * eps0)) for j in range(i)
        )
        delta_i = numerator / (1 + math.exp(eps0)) ** k
        if not 1e-12 < delta_i < 0.5:
            continue
        got = optimal_pure.curve(ledger, delta=delta_i, steps=[k]).final_epsilon
        # δᵢ is a float (relative error ~1e-15·k), and δ(ε) has slope ≥ δ near ε: ε moves by ≲ 1e-13·k.
        assert got == pytest.approx((k - 2 * i) * eps0, rel=1e-9), i
        assert got >= (k - 2 * i) * eps0 * (1 - 1e-12)
        checked += 1
    assert checked >= 3


def test_tightest_on_exponential_mechanism_ledgers_and_below_rdp_on_laplace_ones():
    # RWM-like: 1,000 rounds of a 3e-3-DP choice. Only ε is known of each round, so nothing is tighter.
    rwm = panel(single_phase(exponential_mechanism_event(epsilon=3e-3), 1000), delta=1e-5)
    name, best = rwm.tightest()
    assert name == "optimal_pure"
    assert rwm.final()["rdp"] > best * 1.05  # RDP is 5–17% looser on such ledgers
    # SQ-like: Laplace queries and an up-front count. Each enters as its ε-DP worst case, so PLD, which knows the
    # Laplace loss exactly, may be tighter; RDP and the composition theorems are not.
    sq = panel(
        PrivacyLedger(
            phases=(Release(event=laplace_event(scale=200.0), count=500),),
            upfront=(Release(event=laplace_event(scale=10.0)),),
        ),
        delta=1e-5,
    ).final()
    assert sq["pld"] <= sq["optimal_pure"] < min(sq["rdp"], sq["advanced"], sq["zcdp"], sq["naive"])


def test_curve_counts_up_front_releases_and_grows():
    ledger = PrivacyLedger(
        phases=(Release(event=exponential_mechanism_event(epsilon=0.05), count=40),),
        upfront=(Release(event=laplace_event(scale=2.0)),),
    )
    curve = optimal_pure.curve(ledger, delta=1e-6)
    assert curve.steps.tolist() == list(range(1, 41))
    assert np.all(np.diff(curve.epsilons) > 0)
    at_zero = optimal_pure.curve(ledger, delta=1e-6, steps=[0]).final_epsilon
    # The Laplace count alone, as 0.5-DP randomized response: δ(ε) = p(1 − e^{ε − 0.5}), p = 1/(1 + e^-0.5).
    assert at_zero == pytest.approx(0.5 + math.log1p(-1e-6 * (1 + math.exp(-0.5))), rel=1e-9)
    assert curve.epsilons[-1] <= 0.5 + 40 * 0.05


@pytest.mark.parametrize(
    "event",
    [gaussian_event(noise_multiplier=2.0), dpsgd_step_event(sampling_rate=0.01, noise_multiplier=1.0)],
)
def test_not_applicable_to_gaussian_or_sampled_releases(event):
    ledger = PrivacyLedger(phases=(Release(event=event, count=5),), upfront=(Release(event=laplace_event(scale=1.0)),))
    with pytest.raises(NotApplicableError, match="pure ε-DP releases only"):
        optimal_pure.curve(ledger, delta=1e-5)
    assert "optimal_pure" in panel(ledger, delta=1e-5).not_applicable


def test_refuses_too_large_a_support_and_says_so():
    # Three distinct ε with 200 occurrences each: 201³ ≈ 8.1 million loss points.
    ledger = PrivacyLedger(
        phases=tuple(Release(event=exponential_mechanism_event(epsilon=e), count=200) for e in (0.011, 0.013, 0.017))
    )
    with pytest.raises(NotApplicableError, match="8,120,601 privacy-loss points"):
        optimal_pure.curve(ledger, delta=1e-5, steps=[1, 600])


def test_registered_with_a_title_and_citation():
    entry = ACCOUNTANTS["optimal_pure"]
    assert entry.title == "Optimal composition (pure ε)" and "Kairouz" in entry.citation

"""The attack curve of a guarantee (the highest TPR of any membership-inference attack at each FPR) against closed
forms: the Gaussian mechanism's trade-off curve Φ(Φ⁻¹(α) + μ) (Dong, Roth & Su 2019) from its exact privacy
profile (Balle & Wang 2018), a ledger of Gaussian releases, and pure ε-DP (Kairouz, Oh & Viswanath 2015)."""

import math
import re

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy.stats import norm

from engine.privacy import PureDpEvent, dpsgd_step_event, single_phase
from engine.privacy.accountants import panel
from engine.privacy.ledger import PrivacyLedger, Release
from engine.privacy.tradeoff import (
    ACCUSED,
    FPR_SAMPLES,
    PROFILE_POINTS,
    TRIVIAL,
    AttackBound,
    TradeoffError,
    attack_bound,
    attack_bound_of,
    attack_sentence,
    bound_polyline,
    percent_up,
    pld_profile,
    power_bound,
    profile_top,
)

DENSE = np.linspace(0.0, 1.0, 20_001)
ROUNDING = 1e-12


def gdp_power(alpha, mu: float) -> np.ndarray:
    """1 − G_μ(α) = Φ(Φ⁻¹(α) + μ): the highest power of a test against μ-GDP (Dong, Roth & Su 2019, Eq. 6)."""
    return norm.cdf(norm.ppf(np.asarray(alpha, dtype=float)) + mu)


def gaussian_profile(epsilons, mu: float) -> np.ndarray:
    """δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8), written out here."""
    e = np.asarray(epsilons, dtype=float)
    return norm.cdf(-e / mu + mu / 2) - np.exp(e) * norm.cdf(-e / mu - mu / 2)


def optimal_epsilon_within(alpha, mu: float, top: float) -> np.ndarray:
    """Whether the ε at which the exact curve's bound binds at α (the likelihood-ratio threshold, ±) is on the
    grid [0, top]: |ε*| = |μ Φ⁻¹(1 − α) − μ²/2| (the optimal ε of either branch, Neyman–Pearson)."""
    return np.abs(mu * norm.ppf(1 - np.asarray(alpha)) - mu**2 / 2) <= top


def polyline_at(fpr, tpr, alphas) -> np.ndarray:
    return np.interp(alphas, fpr, tpr)


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
def test_the_gaussian_profile_gives_the_gdp_curve_within_the_grid_spacing(mu):
    """Fed the exact profile on a grid of spacing h that reaches past the optimal ε, the bound is ≥ the exact curve
    at every α (a valid bound) and ≤ e^h times it (the module's tolerance); the stored polyline is ≥ it everywhere."""
    top = 10.0
    epsilons = np.linspace(0.0, top, 2001)
    spacing = epsilons[1]
    deltas = gaussian_profile(epsilons, mu)
    exact = gdp_power(FPR_SAMPLES, mu)
    bound = power_bound(epsilons, deltas, FPR_SAMPLES)
    assert np.all(bound >= exact - ROUNDING)
    within = optimal_epsilon_within(FPR_SAMPLES, mu, top)
    assert within.sum() > 60
    assert np.all(bound[within] <= math.exp(spacing) * exact[within] + ROUNDING)
    fpr, tpr = bound_polyline(epsilons, deltas)
    assert np.all(polyline_at(fpr, tpr, DENSE) >= gdp_power(DENSE, mu) - ROUNDING)
    np.testing.assert_allclose(polyline_at(fpr, tpr, FPR_SAMPLES), bound, rtol=0, atol=1e-12)


def test_a_full_batch_dpsgd_ledger_is_gaussian_with_mu_root_t_over_sigma():
    """q = 1 and T steps at σ: μ = √T/σ. The curve the run stores (by PLD: exact for Gaussian releases) matches
    Φ(Φ⁻¹(α) + μ) within e^h (h: the profile grid's spacing), and is ≥ it at every α."""
    steps, sigma, delta = 16, 4.0, 1e-5
    mu = math.sqrt(steps) / sigma
    ledger = single_phase(dpsgd_step_event(sampling_rate=1.0, noise_multiplier=sigma), steps)
    name, epsilon = panel(ledger, delta=delta).tightest()
    assert name == "pld"
    bound = attack_bound(ledger, accountant=name, epsilon=epsilon, delta=delta)
    assert bound.accountant == "pld"
    fpr, tpr = np.array(bound.fpr), np.array(bound.tpr)
    assert np.all(polyline_at(fpr, tpr, DENSE) >= gdp_power(DENSE, mu) - ROUNDING)
    top = profile_top(epsilon)
    spacing = top / (PROFILE_POINTS - 1)
    within = optimal_epsilon_within(FPR_SAMPLES, mu, top) & (FPR_SAMPLES >= 1e-5)
    at = polyline_at(fpr, tpr, FPR_SAMPLES[within])
    assert np.all(at <= math.exp(spacing) * gdp_power(FPR_SAMPLES[within], mu) + ROUNDING)
    assert len(bound.fpr) <= len(FPR_SAMPLES) + 1  # small enough to store with the result


def test_dp_accountings_discretized_pld_of_gaussian_steps_is_within_its_discretization():
    """The same ledger through dp_accounting's pessimistic PLD at interval Δ (no closed form): ≥ the exact curve,
    and ≤ e^{h + TΔ} times it (each of the T steps' losses rounded up by at most Δ)."""
    steps, sigma, discretization = 10, 3.0, 1e-3
    mu = math.sqrt(steps) / sigma
    ledger = single_phase(dpsgd_step_event(sampling_rate=1.0, noise_multiplier=sigma), steps)
    epsilons = np.linspace(0.0, 8.0, 2001)
    deltas = pld_profile(ledger, epsilons, discretization=discretization)
    bound = power_bound(epsilons, deltas, FPR_SAMPLES)
    exact = gdp_power(FPR_SAMPLES, mu)
    assert np.all(bound >= exact - ROUNDING)
    within = optimal_epsilon_within(FPR_SAMPLES, mu, 8.0) & (FPR_SAMPLES >= 1e-5)
    slack = math.exp(epsilons[1] + steps * discretization)
    assert np.all(bound[within] <= slack * exact[within] + ROUNDING)


def test_a_subsampled_runs_curve_is_monotone_concave_and_above_the_diagonal():
    delta = 1e-5
    ledger = single_phase(dpsgd_step_event(sampling_rate=0.05, noise_multiplier=1.2), 300)
    name, epsilon = panel(ledger, delta=delta).tightest()
    bound = attack_bound(ledger, accountant=name, epsilon=epsilon, delta=delta)
    fpr, tpr = np.array(bound.fpr), np.array(bound.tpr)
    assert fpr[0] == 0.0 and fpr[-1] == 1.0 and tpr[-1] == 1.0
    assert np.all(np.diff(tpr) >= -ROUNDING)  # monotone
    slopes = np.diff(tpr) / np.diff(fpr)
    assert np.all(np.diff(slopes) <= 1e-9 * np.maximum(1.0, slopes[:-1]))  # concave
    assert np.all(tpr >= fpr - ROUNDING)  # never below random guessing
    assert 0.01 < bound.tpr_at(ACCUSED) < 0.5
    # by PLD, tighter than RDP's curve at 1% (both valid)
    by_rdp = attack_bound(ledger, accountant="rdp", epsilon=epsilon, delta=delta)
    assert by_rdp.accountant == "rdp" and bound.tpr_at(ACCUSED) < by_rdp.tpr_at(ACCUSED)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_pure_epsilon_dp_gives_the_closed_form(epsilon):
    """An ε-DP mechanism: TPR ≤ min(1, e^ε α, 1 − e^{−ε}(1 − α)) (Kairouz, Oh & Viswanath 2015), exactly."""
    expected = np.minimum(1.0, np.minimum(math.exp(epsilon) * DENSE, 1 - math.exp(-epsilon) * (1 - DENSE)))
    np.testing.assert_allclose(power_bound([epsilon], [0.0], DENSE), expected, rtol=0, atol=1e-12)
    fpr, tpr = bound_polyline([epsilon], [0.0])
    np.testing.assert_allclose(polyline_at(fpr, tpr, DENSE), expected, rtol=0, atol=1e-12)
    # a run's ledger of one ε-DP release, by its profile: ≥ the closed form, and at most e^h above it
    ledger = PrivacyLedger(upfront=(Release(event=PureDpEvent(epsilon=epsilon)),))
    bound = attack_bound(ledger, accountant="pld", epsilon=epsilon, delta=1e-5)
    at = polyline_at(bound.fpr, bound.tpr, DENSE)
    assert np.all(at >= expected - ROUNDING)
    assert np.all(at <= math.exp(profile_top(epsilon) / (PROFILE_POINTS - 1) + 1e-3) * expected + 1e-9)


def test_the_sentence_reads_the_curve_at_one_percent_rounded_up():
    delta = 1e-5
    ledger = single_phase(dpsgd_step_event(sampling_rate=0.05, noise_multiplier=1.2), 300)
    name, epsilon = panel(ledger, delta=delta).tightest()
    bound = attack_bound(ledger, accountant=name, epsilon=epsilon, delta=delta)
    sentence = attack_sentence(bound)
    [caught] = re.findall(r"can catch at most ([0-9.]+)% of members", sentence)
    at = 100 * bound.tpr_at(ACCUSED)
    assert at <= float(caught) < at + 0.01 * at  # three significant digits, rounded up: still a bound
    assert sentence.startswith("An attacker who wrongly accuses 1% of non-members can catch at most")
    assert "(any membership-inference attack, by PLD;" in sentence
    assert percent_up(0.043701) == "4.38%" and percent_up(0.5) == "50.0%" and percent_up(1.0) == "100%"


def test_a_ledger_no_accountant_bounds_gives_the_trivial_curve_and_says_so():
    ledger = single_phase(dp_event.UnsupportedDpEvent(), 10)
    bound = attack_bound(ledger, accountant=None, epsilon=math.inf, delta=1e-5)
    assert bound == TRIVIAL and not bound.bounded and bound.tpr_at(ACCUSED) == 1.0
    assert "may catch every member" in attack_sentence(bound)
    # an unbounded profile (δ = 1 at every ε) is the same curve: TPR = 1
    assert np.all(power_bound([0.0, 5.0], [1.0, 1.0], DENSE) == 1.0)


def test_a_stored_curve_round_trips_and_a_malformed_one_is_refused():
    bound = AttackBound(fpr=(0.0, 0.5, 1.0), tpr=(0.1, 0.8, 1.0), accountant="rdp")
    assert AttackBound.from_dict(bound.to_dict()) == bound
    assert attack_bound_of(bound.to_dict()) == bound
    for stored in (
        "curve",
        {"fpr": [0.0, 1.0], "tpr": [0.2], "accountant": "pld"},
        {"fpr": [0.0, 1.0], "tpr": [0.2, 1.5], "accountant": "pld"},
        {"fpr": [0.2, 1.0], "tpr": [0.2, 1.0], "accountant": "pld"},
        {"fpr": [0.0, 1.0], "tpr": [0.2, 1.0], "accountant": "mine"},
    ):
        with pytest.raises(TradeoffError):
            AttackBound.from_dict(stored)
        assert attack_bound_of(stored) is None
    with pytest.raises(TradeoffError):
        power_bound([-1.0], [0.0], [0.5])

"""The one-run audit (Steinke, Nasr & Jagielski 2023): its p-value against a brute-force binomial sum, its ceiling
against the closed form, its validity on a mechanism whose ε is known exactly (randomized response), and its
power on mechanisms that leak far more than they claim."""

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.special
import scipy.stats

from engine.privacy import PrivacyError
from engine.privacy.auditing import (
    GUESS_FRACTIONS,
    audit_ceiling,
    audit_scores,
    guess_counts,
    one_run_epsilon,
    one_run_p_value,
    sampled_shift_log_ratio,
)


def brute_force_p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """Proposition 5.2 of Steinke et al. with every binomial tail summed term by term in exact fractions."""
    q = Fraction(float(scipy.special.expit(epsilon)))

    def tail(at_least: int) -> Fraction:  # P[Binomial(guesses, q) ≥ at_least]
        return sum(
            (math.comb(guesses, j) * q**j * (1 - q) ** (guesses - j) for j in range(max(at_least, 0), guesses + 1)),
            Fraction(0),
        )

    beta = tail(correct)
    alpha = max([(tail(correct - i) - beta) / i for i in range(1, correct + 1)], default=Fraction(0))
    return float(min(beta + alpha * Fraction(delta) * 2 * canaries, Fraction(1)))


@pytest.mark.parametrize(
    ("canaries", "guesses", "correct", "epsilon", "delta"),
    [(20, 10, 9, 1.0, 1e-3), (50, 20, 18, 0.5, 1e-5), (100, 40, 40, 2.0, 1e-5), (30, 12, 6, 0.2, 0.0)],
)
def test_the_p_value_is_the_binomial_sum(canaries, guesses, correct, epsilon, delta):
    expected = brute_force_p_value(canaries, guesses, correct, epsilon, delta)
    got = one_run_p_value(canaries=canaries, guesses=guesses, correct=correct, epsilon=epsilon, delta=delta)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("delta", [0.0, 1e-5, 1e-3])
def test_the_bound_sits_where_the_p_value_meets_the_significance(delta):
    epsilon = one_run_epsilon(canaries=200, guesses=60, correct=52, significance=0.05, delta=delta)
    assert epsilon > 0
    at = brute_force_p_value(200, 60, 52, epsilon, delta)
    assert at == pytest.approx(0.05, rel=1e-5)  # refuted up to ε̂ …
    assert brute_force_p_value(200, 60, 52, epsilon * 1.01, delta) > 0.05  # … and not beyond


def test_the_ceiling_is_every_guess_right_at_the_corrected_significance():
    for canaries in (10, 100, 1_000):
        counts = guess_counts(canaries)
        assert counts[-1] == round(0.8 * canaries) and len(counts) <= len(GUESS_FRACTIONS)
        significance, most = 0.05 / len(counts), counts[-1]
        closed_form = float(scipy.special.logit(significance ** (1 / most)))  # δ = 0: q^r = significance
        assert audit_ceiling(canaries, delta=0.0) == pytest.approx(closed_form, rel=1e-6)
        if canaries <= 100:  # the exact sums grow as m²
            brute = brute_force_p_value(canaries, most, most, audit_ceiling(canaries, delta=1e-5), 1e-5)
            assert brute == pytest.approx(significance, rel=1e-5)
    # the figures docs/privacy.md quotes (95%, δ = 1e-5): more canaries, a higher ceiling, yet far from large ε
    assert [round(audit_ceiling(m, delta=1e-5), 2) for m in (100, 1_000, 10_000)] == [2.82, 5.09, 6.37]


def randomized_response(members: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Each canary's membership bit, kept with probability e^ε/(1 + e^ε): exactly ε-DP for each canary, plus a
    tie-breaking jitter independent of membership (post-processing)."""
    keep = rng.random(len(members)) < scipy.special.expit(epsilon)
    return np.where(keep, members, ~members).astype(float) + rng.random(len(members)) * 1e-3


def test_the_bound_exceeds_the_true_epsilon_no_more_often_than_its_confidence_allows():
    """400 audits of 100 canaries against ε-DP randomized response: ε̂ > ε at most 5% of the time by the theorem.
    The test fails only if more than the 99.99% quantile of Binomial(400, 0.05) of them do: a false-failure rate
    below 1e-4 for a valid audit."""
    rng = np.random.default_rng(20231)
    allowed = int(scipy.stats.binom.ppf(1 - 1e-4, 400, 0.05))
    for epsilon in (0.5, 2.0):
        above = 0
        for _ in range(400):
            members = rng.random(100) < 0.5
            audit = audit_scores(randomized_response(members, epsilon, rng), members, delta=0.0)
            above += audit.epsilon > epsilon
        assert above <= allowed, (epsilon, above, allowed)


def test_a_run_that_leaks_everything_reaches_the_ceiling():
    rng = np.random.default_rng(7)
    members = rng.random(1_000) < 0.5
    audit = audit_scores(members + rng.random(1_000) * 1e-3, members, delta=1e-5)  # the score is the membership
    assert audit.epsilon == pytest.approx(audit.ceiling) and audit.correct == audit.guesses == 800
    assert audit.ceiling == pytest.approx(audit_ceiling(1_000, delta=1e-5))


def test_a_mechanism_far_leakier_than_its_claim_is_caught():
    """Randomized response at ε = 6 claimed as ε = 1 (too little noise for its claim): ε̂ refutes the claim."""
    rng = np.random.default_rng(11)
    members = rng.random(1_000) < 0.5
    audit = audit_scores(randomized_response(members, 6.0, rng), members, delta=1e-5)
    assert audit.epsilon > 1.0 * 2


def test_the_sampled_shift_log_ratio_is_the_mixture_over_the_null_in_log_space():
    residual = np.array([-3.0, -0.5, 0.0, 0.5, 1.0, 2.5])
    for variance, rate in [(0.7, 0.2), (4.0, 0.01), (0.09, 0.9)]:
        null = scipy.stats.norm.pdf(residual, 0, math.sqrt(variance))
        mixture = (1 - rate) * null + rate * scipy.stats.norm.pdf(residual, 1, math.sqrt(variance))
        got = sampled_shift_log_ratio(residual, variance=variance, rate=rate)
        assert got == pytest.approx(np.log(mixture / null), rel=1e-12, abs=1e-12)
    # q = 1 (a full batch): the Gaussian shift's ratio itself, with no log(1 − q) to fail
    assert sampled_shift_log_ratio(residual, variance=0.25, rate=1.0) == pytest.approx((residual - 0.5) / 0.25)
    # a tiny σ: exp((r − ½)/s²) would overflow a float; in log space the values are finite and ordered
    tiny = sampled_shift_log_ratio(np.array([0.0, 0.4, 1.0]), variance=1e-6, rate=0.05)
    assert np.all(np.isfinite(tiny)) and tiny[0] == pytest.approx(math.log1p(-0.05)) and tiny[2] > 4e5
    assert tiny[2] == pytest.approx(math.log(0.05) + 0.5 / 1e-6)
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(PrivacyError, match="sampling rate"):
            sampled_shift_log_ratio(residual, variance=1.0, rate=bad)


def test_bad_inputs_are_named_errors():
    with pytest.raises(PrivacyError, match="at least 10 canaries"):
        audit_scores([1.0] * 5, [True] * 5, delta=1e-5)
    with pytest.raises(PrivacyError, match="finite"):
        audit_scores([math.nan] * 10, [True] * 10, delta=1e-5)
    with pytest.raises(PrivacyError, match=r"guesses must be in \[1, 10\]"):
        one_run_epsilon(canaries=10, guesses=11, correct=1, significance=0.05, delta=0.0)
    with pytest.raises(PrivacyError, match="significance"):
        one_run_epsilon(canaries=10, guesses=4, correct=1, significance=1.5, delta=0.0)

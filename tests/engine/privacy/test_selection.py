"""Releasing the best of a search (Papernot & Steinke 2022): ε against dp-accounting's `RepeatAndSelectDpEvent`
built independently from the same numbers, the worst-configuration rule over random ledgers, the composition of
a fixed grid, and the trial count against its distribution (statistical tests with a stated false-failure rate)."""

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.privacy import PrivacyError, dpsgd_step_event, laplace_event, single_phase
from engine.privacy.ledger import PrivacyLedger, Release
from engine.privacy.selection import (
    MAX_TAIL,
    MAX_TRIALS,
    TrialCount,
    TrialDistribution,
    composition_epsilon,
    search_epsilon,
    tnb_mean,
    worst_rdp,
)

DELTA = 1e-5
ALPHA = 1e-4  # each statistical test's false-failure rate
ALL_COUNTS = [
    TrialCount(distribution="poisson", mean=10),
    TrialCount(distribution="geometric", mean=10),
    TrialCount(distribution="logarithmic", mean=10),
    TrialCount(distribution="negative_binomial", mean=10, shape=0.5),
    TrialCount(distribution="negative_binomial", mean=3, shape=2.0),
]
SHAPES = {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}


def independent_event(q: float, sigma: float, steps: int) -> dp_event.DpEvent:
    """One DP-SGD run, written here straight in dp-accounting's vocabulary."""
    step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    return dp_event.SelfComposedDpEvent(step, steps)


def reference_epsilon(event: dp_event.DpEvent, counts: TrialCount) -> float:
    shape = SHAPES.get(counts.distribution.value, counts.shape)
    repeated = dp_event.RepeatAndSelectDpEvent(event=event, mean=counts.mean, shape=shape)
    return RdpAccountant().compose(repeated).get_epsilon(DELTA)


@pytest.mark.parametrize("counts", ALL_COUNTS, ids=lambda c: c.describe())
def test_one_configuration_matches_dp_accounting(counts):
    ledger = single_phase(dpsgd_step_event(sampling_rate=0.02, noise_multiplier=1.3), 800)
    found = search_epsilon([ledger], counts, delta=DELTA)
    assert found.epsilon == pytest.approx(reference_epsilon(independent_event(0.02, 1.3, 800), counts), rel=1e-9)
    assert found.delta == pytest.approx(DELTA, rel=1e-6)  # the cap is never reached at mean 10


@pytest.mark.parametrize("counts", ALL_COUNTS[:4], ids=lambda c: c.describe())
def test_a_noise_grid_costs_what_its_least_noisy_configuration_does(counts):
    """A σ grid: the smallest σ has the largest RDP at every order, so the worst-case mixture is that run."""
    ledgers = [single_phase(dpsgd_step_event(sampling_rate=0.01, noise_multiplier=s), 500) for s in (0.9, 1.5, 3.0)]
    found = search_epsilon(ledgers, counts, delta=DELTA)
    assert found.epsilon == pytest.approx(reference_epsilon(independent_event(0.01, 0.9, 500), counts), rel=1e-9)
    assert found.configurations == 3


ledgers_strategy = st.lists(
    st.tuples(st.floats(0.001, 0.2), st.floats(0.6, 8.0), st.integers(1, 400), st.booleans()), min_size=1, max_size=4
)


def build(params) -> list[PrivacyLedger]:
    found = []
    for q, sigma, steps, laplace in params:
        upfront = (Release(event=laplace_event(scale=1 / 0.05), count=1),) if laplace else ()
        step = Release(event=dpsgd_step_event(sampling_rate=q, noise_multiplier=sigma), count=steps)
        found.append(PrivacyLedger(phases=(step,), upfront=upfront))
    return found


@settings(max_examples=15, deadline=None)
@given(ledgers_strategy, st.sampled_from(ALL_COUNTS))
def test_worst_configuration_bounds_every_configuration(params, counts):
    ledgers = build(params)
    worst = worst_rdp(ledgers)
    whole = search_epsilon(ledgers, counts, delta=DELTA).epsilon
    for ledger in ledgers:
        alone = RdpAccountant().compose(ledger.dp_event())
        assert np.all(worst >= np.asarray(alone._rdp) * (1 - 1e-12))
        # adding configurations never lowers the search's ε; one run's own ε never exceeds it
        assert whole >= search_epsilon([ledger], counts, delta=DELTA).epsilon * (1 - 1e-12)
        assert whole >= alone.get_epsilon(DELTA) * (1 - 1e-12)


@settings(max_examples=10, deadline=None)
@given(ledgers_strategy)
def test_composition_is_the_tightest_valid_bound_of_releasing_every_run(params):
    ledgers = build(params)
    every = dp_event.ComposedDpEvent([ledger.dp_event() for ledger in ledgers])
    name, epsilon = composition_epsilon(ledgers, delta=DELTA)
    rdp = RdpAccountant().compose(every).get_epsilon(DELTA)
    pld = PLDAccountant(value_discretization_interval=1e-4).compose(every).get_epsilon(DELTA)
    assert name in ("rdp", "pld")
    assert epsilon <= rdp * (1 + 1e-9)
    # dp-accounting's PLD is pessimistic by up to about its grid step per composition; ours uses a finer grid
    assert epsilon == pytest.approx(min(rdp, pld), rel=0.02, abs=2e-4)
    single = max(RdpAccountant().compose(ledger.dp_event()).get_epsilon(DELTA) for ledger in ledgers)
    assert epsilon <= len(ledgers) * single * (1 + 1e-9) + 1e-9


def test_anything_not_private_has_no_bound():
    ledger = single_phase(dpsgd_step_event(sampling_rate=0.01, noise_multiplier=1.0), 100)
    assert math.isinf(search_epsilon([ledger, None], ALL_COUNTS[0], delta=DELTA).epsilon)
    assert math.isinf(composition_epsilon([ledger, None], delta=DELTA)[1])


def test_a_reachable_cap_is_charged_to_delta():
    """A logarithmic count with mean 11 passes MAX_TRIALS with a tiny probability p: δ grows by (1 + eᵉ)·p."""
    counts = TrialCount(distribution="logarithmic", mean=11)
    p = counts.tail()
    assert 0 < p <= MAX_TAIL
    assert p == pytest.approx(scipy.stats.logser(1 - counts.gamma).sf(MAX_TRIALS), rel=1e-9)
    ledger = single_phase(dpsgd_step_event(sampling_rate=0.01, noise_multiplier=2.0), 100)
    found = search_epsilon([ledger], counts, delta=DELTA)
    assert found.delta == pytest.approx(DELTA + (1 + math.exp(found.epsilon)) * p, rel=1e-12)
    assert found.delta > DELTA


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"distribution": "poisson", "mean": 0.5}, "mean must be"),
        ({"distribution": "poisson", "mean": 1e6}, "mean must be"),
        ({"distribution": "poisson", "mean": 5, "shape": 1.0}, "shape is for"),
        ({"distribution": "negative_binomial", "mean": 5}, "shape must be"),
        ({"distribution": "negative_binomial", "mean": 5, "shape": -1}, "shape must be"),
        ({"distribution": "binomial", "mean": 5}, "binomial"),
        ({"distribution": "logarithmic", "mean": 100}, "exceed 1000 trials with probability 0.01"),
    ],
)
def test_bad_trial_counts_are_refused(raw, message):
    with pytest.raises((PrivacyError, ValueError), match=message):
        TrialCount(**raw)


@pytest.mark.parametrize("counts", ALL_COUNTS, ids=lambda c: c.describe())
def test_the_sampled_distribution_has_at_most_the_accounted_mean(counts):
    """Sampling uses γ whose mean is at most the accounted mean, and within 1e-9 of it."""
    if counts.distribution is TrialDistribution.POISSON:
        return
    mean = tnb_mean(counts.gamma, counts.dp_shape)
    assert counts.mean * (1 - 1e-9) <= mean <= counts.mean
    # the accountant's own (conservative) γ is at most ours, so its bound covers our draws
    assert dp_accounting_gamma(counts) <= counts.gamma


def dp_accounting_gamma(counts: TrialCount) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant as lib

    return lib._gamma_truncated_negative_binomial(counts.dp_shape, counts.mean)


@pytest.mark.parametrize("counts", ALL_COUNTS, ids=lambda c: c.describe())
def test_trial_counts_follow_their_distribution(counts):
    """5,000 draws from OS randomness against K's probability mass function: a chi-square test over bins of
    expected count ≥ 20 (the last bin holds the tail). It fails by chance with probability ALPHA."""
    draws = np.array([counts.sample() for _ in range(5000)])
    law = counts.distribution_of_k()
    edges = [0 if counts.distribution is TrialDistribution.POISSON else 1]
    while law.sf(edges[-1] - 1) * len(draws) >= 40:
        k = edges[-1]
        while law.pmf(np.arange(edges[-1], k + 1)).sum() * len(draws) < 20:
            k += 1
        edges.append(k + 1)
    edges[-1] = MAX_TRIALS + 1  # the last bin: every draw from its start up
    observed = np.histogram(draws, bins=edges)[0]
    expected = np.array([law.pmf(np.arange(a, b)).sum() for a, b in itertools.pairwise(edges)])
    expected = expected / expected.sum() * len(draws)
    statistic = ((observed - expected) ** 2 / expected).sum()
    assert observed.sum() == len(draws)
    assert scipy.stats.chi2(len(expected) - 1).sf(statistic) > ALPHA, (observed, expected.round(1))


def test_trial_counts_are_fresh_os_randomness():
    counts = TrialCount(distribution="geometric", mean=30)
    # a draw repeats one of ≤ 5 earlier values with probability ≤ 5/30; 15 such repeats in 19: p ≤ C(19,15)/6¹⁵ < 1e-8
    assert len({counts.sample() for _ in range(20)}) > 5


def test_poisson_allows_no_trials_and_the_others_at_least_one():
    rng = np.random.default_rng(0)
    assert min(TrialCount(distribution="poisson", mean=1).sample(rng) for _ in range(200)) == 0
    for counts in ALL_COUNTS[1:]:
        assert min(counts.sample(rng) for _ in range(200)) >= 1

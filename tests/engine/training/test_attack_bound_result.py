"""A finished private run stores its attack curve (`engine.privacy.tradeoff`) with its result and reads it at 1%
false positives in its privacy statement: for DP-SGD with every example in every lot (q = 1), T steps at σ are
the Gaussian mechanism with μ = √T/σ, whose curve is Φ(Φ⁻¹(α) + μ) (Dong, Roth & Su 2019)."""

import math
import re

import numpy as np
from scipy.stats import norm

from engine.privacy.tradeoff import ACCUSED, FPR_SAMPLES, PROFILE_POINTS, AttackBound, profile_top
from engine.training import parse_spec, train
from tests.helpers import fast_spec


def test_a_full_batch_runs_stored_curve_is_the_gaussian_mechanisms(digits):
    steps, sigma = 4, 8.0
    spec = {k: v for k, v in fast_spec(epochs=steps, noise_multiplier=sigma).items() if k != "target_epsilon"}
    result = train(parse_spec(spec | {"lot_size": len(digits.x_train)}), dataset=digits)
    assert result.sampling_rate == 1.0 and result.steps == steps and result.accountant == "pld"
    bound = AttackBound.from_dict(result.to_dict()["attack_bound"])
    mu = math.sqrt(steps) / sigma
    dense = np.linspace(0, 1, 20_001)
    exact = norm.cdf(norm.ppf(dense) + mu)
    at = np.interp(dense, bound.fpr, bound.tpr)
    assert np.all(at >= exact - 1e-12)  # a valid bound at every false-positive rate
    spacing = profile_top(result.epsilon) / (PROFILE_POINTS - 1)
    samples = FPR_SAMPLES[FPR_SAMPLES >= 1e-6]
    gdp = norm.cdf(norm.ppf(samples) + mu)
    assert np.all(np.interp(samples, bound.fpr, bound.tpr) <= math.exp(spacing) * gdp + 1e-12)
    [line] = [line for line in result.privacy_statement.splitlines() if "wrongly accuses 1%" in line]
    [caught] = re.findall(r"can catch at most ([0-9.]+)% of members", line)
    assert 100 * bound.tpr_at(ACCUSED) <= float(caught) < 101 * bound.tpr_at(ACCUSED)  # 3 digits, rounded up
    assert abs(float(caught) / 100 - norm.cdf(norm.ppf(ACCUSED) + mu)) < 0.01 * float(caught) / 100


def test_a_non_private_run_stores_no_curve(digits):
    spec = {"dataset": "digits", "model": "logreg", "algorithm": "nonprivate", "epochs": 1, "lot_size": 64}
    result = train(parse_spec(spec | {"lr": 0.5, "seed": 0}), dataset=digits)
    assert result.attack_bound is None and "wrongly accuses" not in result.privacy_statement

"""Exact accounting of Gaussian releases that are not subsampled, in closed form.

A Gaussian release of a sensitivity-1 query with noise multiplier σ is μ-GDP with μ = 1/σ, and composing
Gaussian releases is again a Gaussian mechanism: μ = √(Σᵢ 1/σᵢ²) (Dong, Roth & Su 2019, Cor. 3.3). Its exact
privacy profile is δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8), inverted by
dp_accounting's `gaussian_mechanism.get_epsilon_gaussian` and then moved up until the profile confirms it, so
every ε reported is a valid upper bound. A DP-SGD step at sampling rate q = 1 puts every example in every lot: it
is the Gaussian release itself (`gaussian_sigma`), so T steps cost one evaluation whatever T is, where the
discretized PLD of T steps needs memory that grows with T.
"""

import math

import numpy as np
from dp_accounting import dp_event
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian
from scipy.special import log_ndtr

from engine.privacy.ledger import PrivacyLedger


def gaussian_sigma(event: dp_event.DpEvent) -> float | None:
    """σ of a Gaussian release (or a Poisson-sampled one at rate 1, the same release); None for anything else."""
    if isinstance(event, dp_event.PoissonSampledDpEvent) and event.sampling_probability == 1.0:
        event = event.event
    if isinstance(event, dp_event.GaussianDpEvent) and event.noise_multiplier > 0:
        return float(event.noise_multiplier)
    return None


def ledger_mus(ledger: PrivacyLedger, steps) -> np.ndarray | None:
    """μ of the ledger after each of `steps` when every release is a Gaussian release; None otherwise."""
    sigmas = [gaussian_sigma(r.event) for r in ledger.releases]
    if not sigmas or any(s is None for s in sigmas):
        return None
    inverse_variances = np.array([1.0 / s**2 for s in sigmas], dtype=np.float64)
    return np.sqrt(ledger.counts_at(steps).astype(np.float64) @ inverse_variances)


def log_delta(mu: float, epsilon: float) -> float:
    """log δ(ε) of μ-GDP, evaluated as log Φ(a) + log(1 − e^{ε + log Φ(b) − log Φ(a)}) (no cancellation)."""
    a, b = mu / 2 - epsilon / mu, -mu / 2 - epsilon / mu
    log_a, log_b = float(log_ndtr(a)), float(log_ndtr(b))
    ratio = epsilon + log_b - log_a
    return log_a + math.log(-math.expm1(ratio)) if ratio < 0 else -math.inf


def epsilon_for_delta(mu: float, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ δ for μ-GDP (rounded up until the profile confirms it)."""
    if mu == 0:
        return 0.0
    epsilon = float(get_epsilon_gaussian(1.0 / mu, delta))
    target, step = math.log(delta), 1e-12 * max(1.0, epsilon)
    while log_delta(mu, epsilon) > target:
        epsilon, step = epsilon + step, step * 2
    return epsilon


def delta_profile(sigma: float, epsilons: np.ndarray) -> np.ndarray:
    """δ(ε) of one Gaussian release with noise multiplier σ at each ε (vectorized Balle & Wang profile)."""
    mu = 1.0 / sigma
    eps = np.asarray(epsilons, dtype=np.float64)
    log_a, log_b = log_ndtr(mu / 2 - eps / mu), log_ndtr(-mu / 2 - eps / mu)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratio = np.minimum(eps + log_b - log_a, 0.0)
        return np.where(ratio < 0, np.exp(log_a) * -np.expm1(ratio), 0.0)


def epsilons(ledger: PrivacyLedger, *, delta: float, steps) -> np.ndarray | None:
    """Exact ε(δ) after each of `steps` for a ledger of Gaussian releases only; None for any other ledger."""
    mus = ledger_mus(ledger, steps)
    if mus is None:
        return None
    return np.array([epsilon_for_delta(float(mu), delta) for mu in mus], dtype=np.float64)

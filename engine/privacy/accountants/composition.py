"""Composition theorems over per-release (ε₀, δ₀) guarantees, as seed 000 teaches.

Each release's (ε₀, δ₀) comes from its exact single-occurrence privacy profile δ₀(ε₀) (the PLD of
one occurrence, a valid upper bound), inverted conservatively on a fine ε grid. The total δ is
split evenly over the K occurrences so far.

- Naive (basic) composition, Dwork–Roth Thm 3.16: Σᵢ εᵢ with δ = Σᵢ δᵢ.
- Advanced composition, Dwork–Roth Thm 3.20 (Dwork, Rothblum, Vadhan 2010): for any δ' > 0,
  ε' = √(2 ln(1/δ') Σᵢ εᵢ²) + Σᵢ εᵢ(e^εᵢ − 1) with δ = δ' + Σᵢ δᵢ. For equal εᵢ this is the
  theorem's √(2k ln(1/δ')) ε + k ε(e^ε − 1); its proof (Azuma's inequality over per-step privacy
  losses bounded by εᵢ with mean at most εᵢ(e^εᵢ − 1)) gives the per-step sum unchanged. The split
  δ' = f·δ is chosen per step among a few fractions f; every candidate is a valid bound.
"""

from functools import lru_cache

import numpy as np
from dp_accounting import NeighboringRelation, dp_event

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.accountants.pld import PldAccountant
from engine.privacy.errors import NotApplicableError, check_delta
from engine.privacy.ledger import PrivacyLedger

EPSILON_GRID = np.concatenate([[0.0], np.geomspace(1e-5, 200.0, 4000)])  # steps of 0.42%
DELTA_PRIME_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
PROFILE_DISCRETIZATION = 1e-4


@lru_cache(maxsize=256)
def delta_profile(event: dp_event.DpEvent, neighboring: NeighboringRelation) -> np.ndarray:
    """δ(ε) of one occurrence of `event` at each ε of EPSILON_GRID (non-increasing)."""
    accountant = PldAccountant(neighboring_relation=neighboring, value_discretization_interval=PROFILE_DISCRETIZATION)
    if not accountant.supports(event):
        raise NotApplicableError(f"no single-release privacy profile for {type(event).__name__}")
    deltas = np.asarray(accountant.compose(event).pld.get_delta_for_epsilon(EPSILON_GRID), dtype=np.float64)
    return np.minimum.accumulate(deltas)


def epsilon_for_delta(profile: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """The smallest grid ε with δ(ε) ≤ δ₀ for each δ₀ (a valid, conservative inverse); ∞ if none."""
    reversed_profile = profile[::-1]  # non-decreasing
    index = len(profile) - np.searchsorted(reversed_profile, deltas, side="right")
    return np.where(index < len(profile), EPSILON_GRID[np.minimum(index, len(profile) - 1)], np.inf)


def _per_release_epsilons(ledger: PrivacyLedger, per_occurrence_delta: np.ndarray) -> np.ndarray:
    """(steps × releases) ε₀ of each release at the per-occurrence δ₀ of each step."""
    columns = [epsilon_for_delta(delta_profile(r.event, ledger.neighboring), per_occurrence_delta)
               for r in ledger.releases]  # fmt: skip
    return np.stack(columns, axis=1) if columns else np.zeros((len(per_occurrence_delta), 0))


def naive_curve(ledger: PrivacyLedger, *, delta: float, steps: np.ndarray | None = None) -> EpsilonCurve:
    check_delta(delta)
    steps = ledger.queried_steps(steps)
    counts = ledger.counts_at(steps).astype(np.float64)
    occurrences = np.maximum(counts.sum(axis=1), 1.0)
    eps0 = _per_release_epsilons(ledger, delta / occurrences)
    with np.errstate(invalid="ignore"):
        eps = np.nan_to_num(counts * eps0, nan=0.0).sum(axis=1)
    return EpsilonCurve(accountant="naive", delta=delta, steps=steps, epsilons=eps)


def advanced_curve(ledger: PrivacyLedger, *, delta: float, steps: np.ndarray | None = None) -> EpsilonCurve:
    check_delta(delta)
    steps = ledger.queried_steps(steps)
    counts = ledger.counts_at(steps).astype(np.float64)
    occurrences = np.maximum(counts.sum(axis=1), 1.0)
    best = np.full(len(steps), np.inf)
    for fraction in DELTA_PRIME_FRACTIONS:
        eps0 = _per_release_epsilons(ledger, (1 - fraction) * delta / occurrences)
        with np.errstate(invalid="ignore", over="ignore"):
            squares = np.nan_to_num(counts * eps0**2, nan=0.0).sum(axis=1)
            drift = np.nan_to_num(counts * eps0 * np.expm1(eps0), nan=0.0).sum(axis=1)
            candidate = np.sqrt(2 * np.log(1 / (fraction * delta)) * squares) + drift
        best = np.minimum(best, candidate)
    return EpsilonCurve(accountant="advanced", delta=delta, steps=steps, epsilons=best)

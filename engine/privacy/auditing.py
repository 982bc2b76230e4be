"""An empirical lower bound on ε from one training run: Steinke, Nasr & Jagielski, "Privacy auditing with one (1)
training run" (NeurIPS 2023), following JAX Privacy's `auditing.py` (`CanaryScoreAuditor.epsilon_one_run`),
written on numpy and scipy.

m canaries each join the training data independently with probability ½. After training, every canary gets a
score (higher: more likely it was in); the auditor guesses "in" for the k₊ highest scores and "out" for the k₋
lowest, r = k₊ + k₋ guesses in all. If the run is (ε, δ)-DP for each canary, the number of correct guesses is
at most Binomial(r, eᵉ/(1 + eᵉ)) plus a δ term (Steinke et al., Theorem 3.1 and Proposition 5.2), so a count
that such a binomial reaches with probability below `significance` refutes that ε: the largest refuted ε is
ε̂, a lower bound on the run's true ε that holds with probability 1 − `significance`.

The guess counts r are declared here in advance (`GUESS_FRACTIONS` of m, split evenly between the highest and
the lowest scores) and the best is taken with a Bonferroni correction over them, so ε̂ is valid whatever the
scores. m canaries can never show more than the **ceiling**: ε̂ when every one of m guesses is right
(`audit_ceiling`); a small ε̂ from few canaries is no evidence that the run is private.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats

from engine.privacy.errors import PrivacyError

# r / m, declared in advance (the test is corrected for these 5 tries); at most 0.8, so that a run that leaks
# everything gets every guess right: about m/2 canaries are in, rarely fewer than 0.4m of either kind.
GUESS_FRACTIONS = (0.05, 0.1, 0.2, 0.5, 0.8)
DEFAULT_CONFIDENCE = 0.95
MIN_CANARIES = 10


@dataclasses.dataclass(frozen=True, kw_only=True)
class CanaryAudit:
    """What one run's canaries show: `epsilon` (ε̂, a lower bound on ε with probability `confidence`), from
    `correct` right guesses out of `guesses` among `canaries`; `ceiling` is the most ε̂ those canaries could show."""

    canaries: int
    guesses: int
    correct: int
    epsilon: float
    ceiling: float
    confidence: float
    delta: float

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


AUDIT_FIELDS = tuple(field.name for field in dataclasses.fields(CanaryAudit))  # what a stored audit holds
CANARY_KINDS = {"gradient": "gradient canaries (white-box)", "input": "input canaries (black-box)"}


def check_audit(canaries: int, guesses: int, correct: int, significance: float, delta: float) -> None:
    if not 1 <= guesses <= canaries:
        raise PrivacyError(f"guesses must be in [1, {canaries}] (the canaries), got {guesses}")
    if not 0 <= correct <= guesses:
        raise PrivacyError(f"correct guesses must be in [0, {guesses}], got {correct}")
    if not 0.0 < significance < 1.0:
        raise PrivacyError(f"significance must be in (0, 1), got {significance}")
    if not 0.0 <= delta < 1.0:
        raise PrivacyError(f"delta must be in [0, 1), got {delta}")


def one_run_p_value(*, canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """The probability that an (ε, δ)-DP run lets `guesses` guesses about `canaries` canaries be right at least
    `correct` times (Steinke et al. 2023, Proposition 5.2: the binomial tail β plus the δ term 2mδ·α)."""
    q = scipy.special.expit(epsilon)
    beta = float(scipy.stats.binom.sf(correct - 1, guesses, q))
    if delta == 0 or correct == 0:
        return beta
    i = np.arange(1, correct + 1)
    alpha = float(np.max((scipy.stats.binom.sf(correct - i - 1, guesses, q) - beta) / i, initial=0.0))
    return min(beta + alpha * delta * 2 * canaries, 1.0)


def one_run_epsilon(*, canaries: int, guesses: int, correct: int, significance: float, delta: float) -> float:
    """The largest ε that `correct` right guesses out of `guesses` refute at `significance` (0 when none is)."""
    check_audit(canaries, guesses, correct, significance, delta)

    def refuted_by(epsilon: float) -> float:  # > 0 while the claim "the run is (ε, δ)-DP" is refuted
        p = one_run_p_value(canaries=canaries, guesses=guesses, correct=correct, epsilon=epsilon, delta=delta)
        return significance - p

    if refuted_by(0.0) <= 0:
        return 0.0
    low, high = 0.0, 1.0
    while refuted_by(high) > 0:  # ends: as ε grows every guess is right with probability → 1
        low, high = high, 2 * high
    return float(scipy.optimize.brentq(refuted_by, low, high, xtol=1e-9))


def guess_counts(canaries: int) -> list[int]:
    """The r of `GUESS_FRACTIONS` for m canaries (even, at least 2), without repeats."""
    counts = [min(canaries, max(2, 2 * round(f * canaries / 2))) for f in GUESS_FRACTIONS]
    return sorted(set(counts))


def audit_ceiling(canaries: int, *, confidence: float = DEFAULT_CONFIDENCE, delta: float) -> float:
    """The largest ε̂ that `audit_scores` can report for m canaries: every one of the largest number of guesses
    right, at the Bonferroni-corrected significance."""
    significance = (1 - confidence) / len(guess_counts(canaries))
    most = guess_counts(canaries)[-1]
    return one_run_epsilon(canaries=canaries, guesses=most, correct=most, significance=significance, delta=delta)


def audit_scores(
    scores: Sequence[float], members: Sequence[bool], *, delta: float, confidence: float = DEFAULT_CONFIDENCE
) -> CanaryAudit:
    """ε̂ from each canary's score (higher: more likely in) and whether it was in: for every r of `guess_counts`,
    guess "in" for the r/2 highest scores and "out" for the r/2 lowest; report the best r's bound, each tested at
    significance (1 − confidence)/len(counts). Ties are broken by canary order, which membership does not depend on."""
    values, inside = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    canaries = len(values)
    if canaries < MIN_CANARIES or len(inside) != canaries:
        raise PrivacyError(f"an audit needs at least {MIN_CANARIES} canaries, each with a score and a membership")
    if not np.all(np.isfinite(values)):
        raise PrivacyError("canary scores must be finite numbers")
    if not 0.0 < confidence < 1.0:
        raise PrivacyError(f"confidence must be in (0, 1), got {confidence}")
    order = np.argsort(-values, kind="stable")  # highest first
    counts = guess_counts(canaries)
    significance = (1 - confidence) / len(counts)
    best: tuple[float, int, int] | None = None  # (ε̂, r, right guesses); with nothing refuted, the largest r's
    for guesses in counts:
        top, bottom = order[: guesses // 2], order[canaries - (guesses - guesses // 2) :]
        correct = int(inside[top].sum() + (~inside[bottom]).sum())
        epsilon = one_run_epsilon(
            canaries=canaries, guesses=guesses, correct=correct, significance=significance, delta=delta
        )
        if best is None or epsilon > best[0] or (epsilon == best[0] == 0.0):
            best = (epsilon, guesses, correct)
    epsilon, guesses, correct = best
    return CanaryAudit(
        canaries=canaries,
        guesses=guesses,
        correct=correct,
        epsilon=epsilon,
        ceiling=audit_ceiling(canaries, confidence=confidence, delta=delta),
        confidence=confidence,
        delta=delta,
    )


def sampled_shift_log_ratio(residual: np.ndarray, *, variance: np.ndarray | float, rate: float) -> np.ndarray:
    """log [((1 − q)·N(r; 0, s²) + q·N(r; 1, s²)) / N(r; 0, s²)] for each residual r, s² = `variance`, q = `rate`:
    Neyman–Pearson's statistic for one release of a sum that holds a unit shift with probability q (a canary
    sampled into the lot) against one that never does. Computed in log space, so a tiny s (a run with little
    noise) gives large finite values, not overflow; q = 1 gives (r − ½)/s² exactly, with no log(1 − q)."""
    if not 0.0 < rate <= 1.0:
        raise PrivacyError(f"the sampling rate must be in (0, 1], got {rate}")
    s2 = np.maximum(np.asarray(variance, dtype=float), np.finfo(float).tiny)
    shifted = (np.asarray(residual, dtype=float) - 0.5) / s2  # log N(r; 1, s²) − log N(r; 0, s²)
    if rate == 1.0:
        return shifted
    return np.logaddexp(np.log1p(-rate), np.log(rate) + shifted)


def audit_sentence(audit: CanaryAudit, *, kind: str) -> str:
    """The audit in the run's privacy statement: the lower bound beside the ceiling, read as what it is."""
    canaries = CANARY_KINDS.get(kind, kind)
    return (
        f"Audited with {audit.canaries:,} {canaries}, each in the training data with probability ½ (Steinke, Nasr & "
        f"Jagielski 2023): {audit.correct:,} of {audit.guesses:,} membership guesses right, so the true ε is at "
        f"least {audit.epsilon:.3f} with {audit.confidence:.0%} confidence at δ = {audit.delta:.3g}. "
        f"{audit.canaries:,} canaries can never show more than ε = {audit.ceiling:.3f}: a lower bound below that "
        "ceiling is no proof that the run is more private than its reported ε, only that it is not less private "
        "than the bound."
    )

"""The exact optimal composition of pure ε-DP releases (Kairouz, Oh & Viswanath 2015, Thm 3.3; Murtagh &
Vadhan 2016 for different εᵢ).

Any (adaptive) composition of εᵢ-DP mechanisms is dominated by the composition of their worst cases, randomized
response: each occurrence has privacy loss +εᵢ with probability pᵢ = e^εᵢ/(1 + e^εᵢ) and −εᵢ otherwise (under
the first of the two neighbouring distributions; KOV Thm 3.3 and its proof, and Murtagh & Vadhan 2016 for
heterogeneous εᵢ). So the composition is (ε, δ(ε))-DP with

    δ(ε) = E_P[(1 − e^{ε − L})₊],   L = Σᵢ εᵢ·(±1),

and no smaller δ(ε) holds for every εᵢ-DP mechanism: this is the tightest bound that uses only the εᵢ.
Occurrences with equal εᵢ form a binomial group; the distribution of L is the product of the groups' binomials,
enumerated exactly (at most `MAX_OUTCOMES` loss points). On the interval between two consecutive loss values
the active set {l > ε} is fixed and δ(ε) = A − e^ε B (A = P(L > ε), B = Q(L > ε), Q the other distribution),
so the ε with δ(ε) = δ is solved in closed form there, in log space; each answer is then checked against
δ(ε) evaluated as a sum of positive terms (no cancellation) and moved up until the check passes, so every ε
reported is a valid upper bound.

Laplace releases (`LaplaceDpEvent`, noise multiplier b = scale/sensitivity) are (1/b)-DP and enter as their
worst case (PLD accounts for them exactly; the panel reports the smaller). Anything that is not pure ε-DP
(Gaussian, subsampled) is not applicable.
"""

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event
from scipy.special import gammaln

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.accountants.registry import Accountant, register_accountant
from engine.privacy.errors import NotApplicableError, check_delta
from engine.privacy.events import PureDpEvent
from engine.privacy.ledger import PrivacyLedger

NAME = "optimal_pure"
TITLE = "Optimal composition (pure ε)"
MAX_OUTCOMES = 2_000_000  # loss points enumerated for one step count: the product of (count + 1) over groups
UNIT_ROUNDOFF = 2.0**-53
NOT_PURE = {
    dp_event.GaussianDpEvent: "a Gaussian release",
    dp_event.PoissonSampledDpEvent: "a subsampled release (DP-SGD lot)",
    dp_event.SampledWithoutReplacementDpEvent: "a subsampled release (DP-SGD lot)",
}


def pure_epsilons(event: dp_event.DpEvent) -> Counter[float]:
    """ε of each pure ε-DP mechanism in one occurrence of `event`, with multiplicities."""
    if isinstance(event, PureDpEvent):
        return Counter({float(event.epsilon): 1})
    if isinstance(event, dp_event.LaplaceDpEvent):
        return Counter({1.0 / float(event.noise_multiplier): 1})
    if isinstance(event, dp_event.NoOpDpEvent):
        return Counter()
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = pure_epsilons(event.event)
        return Counter({eps: n * event.count for eps, n in inner.items() if n * event.count})
    if isinstance(event, dp_event.ComposedDpEvent):
        total: Counter[float] = Counter()
        for part in event.events:
            total.update(pure_epsilons(part))
        return total
    kind = NOT_PURE.get(type(event), type(event).__name__)
    raise NotApplicableError(f"applies to pure ε-DP releases only (Laplace, exponential mechanism); {kind} is not one")


@dataclass(frozen=True)
class LossDistribution:
    """The privacy loss L of the composition under P: its values (decreasing) and their log-probabilities."""

    losses: np.ndarray
    log_p: np.ndarray
    log_error: float  # a bound on the absolute rounding error of each log-probability
    loss_error: float  # ... and of each loss value

    def relative_error(self) -> float:
        """A bound on the relative rounding error of `delta_of`: the log-probabilities' error, plus a few
        roundings per term of the log-sum-exp."""
        return 2.0 * (self.log_error + 8.0 * len(self.losses) * UNIT_ROUNDOFF)


def check_support(groups_at: list[dict[float, int]]) -> None:
    """Refuse (NotApplicableError) when some step's loss distribution has more than MAX_OUTCOMES points."""
    largest = max((math.prod(k + 1 for k in groups.values()) for groups in groups_at), default=1)
    if largest > MAX_OUTCOMES:
        raise NotApplicableError(
            f"the exact composition would enumerate {largest:,} privacy-loss points, more than the "
            f"{MAX_OUTCOMES:,} this accountant allows (too many distinct ε values or releases)"
        )


def loss_distribution(groups: dict[float, int]) -> LossDistribution:
    """The positive values of L = Σ εᵢ·(±1) over every combination of the groups' binomial outcomes, sorted by
    decreasing loss. Group ε with count k: j minus signs, loss ε(k − 2j), P = C(k, j) p^(k−j) (1 − p)^j."""
    check_support([groups])
    losses, log_p, magnitude = np.zeros(1), np.zeros(1), 0.0
    for eps, k in groups.items():
        # Outcomes with loss ≤ 0 add nothing to δ(ε) for ε ≥ 0; a lone group needs only j < k/2 of them.
        j = np.arange((k + 1) // 2 if len(groups) == 1 else k + 1, dtype=np.float64)
        log_plus, log_minus = -np.logaddexp(0.0, -eps), -np.logaddexp(0.0, eps)  # log p, log(1 − p): finite
        group_log_p = gammaln(k + 1) - gammaln(j + 1) - gammaln(k - j + 1) + (k - j) * log_plus + j * log_minus
        # Each log-probability sums terms no larger than these; each loss is ε times an exact integer.
        magnitude += 3.0 * gammaln(k + 1) + k * (abs(log_plus) + abs(log_minus)) + k * eps
        losses = (losses[:, None] + eps * (k - 2 * j)[None, :]).ravel()
        log_p = (log_p[:, None] + group_log_p[None, :]).ravel()
    positive = losses > 0
    losses, log_p = losses[positive], log_p[positive]
    if len(groups) > 1:
        order = np.argsort(-losses, kind="stable")
        losses, log_p = losses[order], log_p[order]
    log_error = 8.0 * UNIT_ROUNDOFF * (magnitude + len(groups) + 1.0)
    # Each loss is a sum of len(groups) rounded products ε·integer: within 2·len(groups)+1 roundings of its size.
    loss_error = 2.0 * (2 * len(groups) + 1) * UNIT_ROUNDOFF * (float(np.abs(losses).max()) if len(losses) else 0.0)
    return LossDistribution(losses=losses, log_p=log_p, log_error=log_error, loss_error=loss_error)


def delta_of(epsilon: float, distribution: LossDistribution) -> float:
    """δ(ε) = Σ_{l > ε} P(l)(1 − e^{ε − l}): a sum of positive terms (no cancellation)."""
    losses, log_p = distribution.losses, distribution.log_p
    active = losses > epsilon
    if not active.any():
        return 0.0
    with np.errstate(divide="ignore"):
        terms = log_p[active] + np.log(-np.expm1(epsilon - losses[active]))
    top = terms.max()
    return float(np.exp(top) * np.sum(np.exp(terms - top))) if np.isfinite(top) else 0.0


def log_cumulative_sum(log_x: np.ndarray) -> np.ndarray:
    """log Σ_{i ≤ j} x_i for every j: a cumulative sum of positive terms, scaled by the largest (each partial
    sum is accurate to n roundings; terms below e^-745 of the largest underflow to 0, far below any δ)."""
    top = log_x.max()
    with np.errstate(divide="ignore"):
        return top + np.log(np.cumsum(np.exp(log_x - top)))


def epsilon_for_delta(distribution: LossDistribution, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ δ, rounded up until a positive-sum evaluation confirms it."""
    losses, log_p = distribution.losses, distribution.log_p
    if len(losses) == 0:
        return 0.0  # no positive privacy loss: δ(0) = 0
    log_q = log_p - losses  # the other neighbour's probability of each outcome
    log_a, log_b = log_cumulative_sum(log_p), log_cumulative_sum(log_q)
    # δ at each loss value l_{j+1} with the active set {0..j}: A_j − e^{l_{j+1}} B_j (0 past the last point).
    nxt = np.append(losses[1:], -np.inf)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_next = log_a + np.log(-np.expm1(np.minimum(nxt + log_b - log_a, 0.0)))
    log_delta = math.log(delta)
    # δ(l_j) ≤ δ < δ(l_{j+1}) puts the answer in [l_{j+1}, l_j]; past loss 0 it is clamped to 0.
    j = int(np.flatnonzero((at_next > log_delta) | (nxt <= 0.0))[0])  # the last nxt is −∞: never empty
    # There, with the active set {0..j}: A_j − e^ε B_j = δ ⇔ ε = log(A_j − δ) − log B_j.
    gap = log_delta - log_a[j]  # ≥ 0: δ ≥ A_j ≥ δ(ε) on the whole interval
    solved = log_a[j] + math.log(-math.expm1(gap)) - log_b[j] if gap < 0 else -math.inf
    epsilon = min(max(solved, nxt[j], 0.0), float(losses[j]))
    # The step that covers δ's rounding error bound at the slope |δ'(ε)| = e^ε B_j, and ε's own rounding.
    slope = math.exp(min(epsilon + log_b[j], 700.0))
    step = 4.0 * distribution.relative_error() * delta / slope if slope > 0 else 0.0
    return round_up(epsilon, distribution, delta, first_step=step + 16.0 * UNIT_ROUNDOFF * (1.0 + epsilon))


def round_up(epsilon: float, distribution: LossDistribution, delta: float, *, first_step: float) -> float:
    """The closed form may be off by rounding: move ε up (by `first_step`, then 4× more each time) until
    δ(ε), less its own rounding error bound, is at most δ; then add the losses' rounding error bound (true losses
    at most `loss_error` above the computed ones give δ(ε) at most the computed δ(ε − loss_error)). The largest
    loss (Σ εᵢ, pure composition) always passes: there δ(ε) = 0."""
    allowed = delta * (1.0 - distribution.relative_error())
    if epsilon == 0.0 and delta_of(-distribution.loss_error, distribution) <= allowed:
        return 0.0
    largest = float(distribution.losses[0])
    candidate, step = min(epsilon + first_step, largest), 4.0 * first_step
    while candidate < largest and delta_of(candidate, distribution) > allowed:
        candidate, step = min(epsilon + step, largest), step * 4
    return candidate + distribution.loss_error


def curve(ledger: PrivacyLedger, *, delta: float, steps: np.ndarray | None = None) -> EpsilonCurve:
    """ε after each of `steps` (default: every step 1..T). One step count with n loss points costs O(n log n)."""
    check_delta(delta)
    steps = ledger.queried_steps(steps)
    per_release = [pure_epsilons(r.event) for r in ledger.releases]  # NotApplicableError before any work
    groups_at = []
    for charged in ledger.counts_at(steps):
        groups: Counter[float] = Counter()
        for release, count in zip(per_release, charged, strict=True):
            groups.update({eps: n * int(count) for eps, n in release.items()})
        groups_at.append({eps: k for eps, k in groups.items() if k > 0 and eps > 0})
    check_support(groups_at)  # before any work, not at the first step that is too large
    epsilons = np.array([epsilon_for_delta(loss_distribution(g), delta) for g in groups_at], dtype=np.float64)
    return EpsilonCurve(accountant=NAME, delta=delta, steps=steps, epsilons=epsilons)


register_accountant(
    Accountant(
        name=NAME,
        label="optimal composition (pure ε)",
        title=TITLE,
        citation="Kairouz, Oh & Viswanath 2015, Thm 3.3; Murtagh & Vadhan 2016",
        curve=curve,
        live=True,
    )
)

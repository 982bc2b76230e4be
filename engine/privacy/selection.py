"""The privacy of releasing the best run of a hyperparameter search.

Picking the best of several private runs is not free: releasing the best of a fixed grid of n runs costs the
composition of all n (`composition_epsilon`). Papernot & Steinke, "Hyperparameter tuning with Rényi differential
privacy" (ICLR 2022), make it cheap: run a **random number K of trials**, each a configuration drawn at random,
and release only the best. If every trial is (λ, ε(λ))-RDP, the best of K is RDP with a small additive cost
that depends on K's distribution (their Theorems 2 and 6): Poisson, geometric, logarithmic or truncated
negative binomial. `dp_accounting` implements it as `RepeatAndSelectDpEvent`; this module feeds it.

- A trial draws its configuration uniformly from the grid: a mixture of the configurations' mechanisms. Rényi
  divergence is jointly quasi-convex (van Erven & Harremoës 2014, Thm 13), so the mixture is RDP with the
  pointwise maximum of the configurations' RDP curves (`worst_rdp`), carried by `RdpCurveDpEvent`.
- K is drawn from OS randomness (`TrialCount.sample`) with the distribution the accountant is told about; a
  draw above `MAX_TRIALS` runs only `MAX_TRIALS`: that changes the output only when K > `MAX_TRIALS`, an event of
  probability p independent of the data, so δ grows by (1 + eᵉ)·p (`SearchEpsilon.delta`); a count whose p
  exceeds `MAX_TAIL` is refused.
- The bound covers the best trial's model and score; the number of trials and the other trials stay private.
"""

import dataclasses
import math
import secrets
from collections.abc import Sequence
from enum import StrEnum

import attr
import numpy as np
import scipy.stats
from dp_accounting import dp_event

from engine.privacy.accountants import panel
from engine.privacy.accountants.rdp import DEFAULT_ORDERS, RdpAccountant, cumulative_rdp
from engine.privacy.errors import NotApplicableError, PrivacyError, check_delta
from engine.privacy.ledger import PrivacyLedger, Release

MAX_TRIALS = 1000  # the most trials one search trains
MAX_MEAN = 100.0
MAX_SHAPE = 100.0
MAX_TAIL = 1e-12  # the largest P(K > MAX_TRIALS) accepted: it is added to δ, times 1 + eᵉ
COMPOSITION_ACCOUNTANTS = ("rdp", "pld")  # releasing every run of a grid: the tightest of these


class TrialDistribution(StrEnum):
    """The distribution of the number of trials, by its `dp_accounting` shape η."""

    POISSON = "poisson"
    GEOMETRIC = "geometric"
    LOGARITHMIC = "logarithmic"
    NEGATIVE_BINOMIAL = "negative_binomial"  # truncated at 0, with a shape η > 0


TRIAL_DISTRIBUTION_TITLES = {
    TrialDistribution.POISSON: "Poisson",
    TrialDistribution.GEOMETRIC: "geometric",
    TrialDistribution.LOGARITHMIC: "logarithmic",
    TrialDistribution.NEGATIVE_BINOMIAL: "truncated negative binomial",
}


@attr.define(frozen=True)
class RdpCurveDpEvent(dp_event.DpEvent):
    """A mechanism known only by its RDP at each of `orders` (e.g. the worst of several mechanisms)."""

    orders: tuple[float, ...]
    rdp: tuple[float, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialCount:
    """The number of trials K of a search: `distribution` with mean `mean` (≥ 1) and, for the truncated negative
    binomial, `shape` η > 0 (η = 1 is the geometric, η → 0 the logarithmic, η → ∞ the Poisson)."""

    distribution: TrialDistribution
    mean: float
    shape: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "distribution", TrialDistribution(self.distribution))
        if not (number(self.mean) and 1 <= self.mean <= MAX_MEAN):
            raise PrivacyError(f"mean must be a number in [1, {MAX_MEAN:g}] (the expected number of trials)")
        if self.distribution is TrialDistribution.NEGATIVE_BINOMIAL:
            if not (number(self.shape) and 0 < self.shape <= MAX_SHAPE):
                raise PrivacyError(
                    f"shape must be a number in (0, {MAX_SHAPE:g}] (η of the truncated negative binomial)"
                )
        elif self.shape is not None:
            raise PrivacyError(f"shape is for the negative binomial only, not the {self.distribution.value}")
        if (tail := self.tail()) > MAX_TAIL:
            raise PrivacyError(
                f"mean {self.mean:g} is too large for a {TRIAL_DISTRIBUTION_TITLES[self.distribution]} number of "
                f"trials: it would exceed {MAX_TRIALS} trials with probability {tail:.1g} (at most {MAX_TAIL:g})"
            )

    @property
    def dp_shape(self) -> float:
        """The shape `dp_accounting.RepeatAndSelectDpEvent` takes."""
        return {
            TrialDistribution.POISSON: math.inf,
            TrialDistribution.GEOMETRIC: 1.0,
            TrialDistribution.LOGARITHMIC: 0.0,
        }.get(self.distribution, self.shape)

    @property
    def gamma(self) -> float:
        """The truncated negative binomial's γ whose mean is at most `mean` (Papernot & Steinke §2): sampling with
        it is covered by the accountant, whose conservative γ is at most this one."""
        if self.distribution is TrialDistribution.POISSON:
            raise NotApplicableError("the Poisson distribution has no γ")
        if self.dp_shape == 1.0:
            return 1.0 / self.mean
        low, high = 0.0, 1.0  # the mean falls from ∞ at γ → 0 to 1 at γ → 1
        for _ in range(200):
            middle = (low + high) / 2
            low, high = (low, middle) if tnb_mean(middle, self.dp_shape) <= self.mean else (middle, high)
        return high

    def distribution_of_k(self) -> scipy.stats.rv_discrete:
        """K's distribution (a frozen scipy distribution over 0, 1, 2, ...)."""
        if self.distribution is TrialDistribution.POISSON:
            return scipy.stats.poisson(self.mean)
        if self.dp_shape == 0.0:
            return scipy.stats.logser(1.0 - self.gamma)
        return TruncatedNegativeBinomial(self.dp_shape, self.gamma)

    def tail(self) -> float:
        """P(K > MAX_TRIALS)."""
        return float(self.distribution_of_k().sf(MAX_TRIALS))

    def sample(self, rng: np.random.Generator | None = None) -> int:
        """One draw of K (from OS randomness unless `rng`), at most `MAX_TRIALS`."""
        rng = rng or np.random.default_rng(secrets.randbits(128))
        if self.distribution is TrialDistribution.POISSON:
            k = int(rng.poisson(self.mean))
        elif self.dp_shape == 0.0:
            k = int(rng.logseries(1.0 - self.gamma))
        else:
            while (k := int(rng.negative_binomial(self.dp_shape, self.gamma))) == 0:
                pass
        return min(k, MAX_TRIALS)

    def describe(self) -> str:
        title = TRIAL_DISTRIBUTION_TITLES[self.distribution]
        shape = f", η = {self.shape:g}" if self.shape is not None else ""
        return f"{title} number of trials (mean {self.mean:g}{shape})"


def number(value) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def tnb_mean(gamma: float, shape: float) -> float:
    """The mean of the truncated negative binomial (η = `shape`; η = 0: logarithmic), Papernot & Steinke §2."""
    if shape == 0.0:
        return (1.0 - gamma) / (gamma * math.log(1.0 / gamma))
    return shape * (1.0 - gamma) / (gamma * (1.0 - gamma**shape))


class TruncatedNegativeBinomial:
    """NB(η, γ) conditioned on K ≥ 1: P(K = k) = C(k+η−1, k) γ^η (1−γ)^k / (1 − γ^η), k ≥ 1."""

    def __init__(self, shape: float, gamma: float):
        self.inner = scipy.stats.nbinom(shape, gamma)
        self.mass = 1.0 - gamma**shape

    def pmf(self, k):
        k = np.asarray(k)
        return np.where(k >= 1, self.inner.pmf(k) / self.mass, 0.0)

    def sf(self, k):
        return np.minimum(1.0, self.inner.sf(np.maximum(k, 0)) / self.mass)


def worst_rdp(ledgers: Sequence[PrivacyLedger | None], orders: tuple[float, ...] = DEFAULT_ORDERS) -> np.ndarray:
    """The RDP of running one of `ledgers` picked at random: their pointwise maximum (∞ if one is None, not
    private)."""
    if not ledgers:
        raise PrivacyError("a search needs at least one configuration")
    if any(ledger is None for ledger in ledgers):
        return np.full(len(orders), np.inf)
    if len({ledger.neighboring for ledger in ledgers}) > 1:
        raise NotApplicableError("the configurations protect different neighbouring relations")
    return np.max(np.stack([cumulative_rdp(ledger, [ledger.steps], orders)[0] for ledger in ledgers]), axis=0)


class SearchAccountant(RdpAccountant):
    """The RDP accountant, also accepting `RdpCurveDpEvent` (at its own orders)."""

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, RdpCurveDpEvent):
            if tuple(event.orders) != tuple(float(a) for a in self._orders):
                raise NotApplicableError("an RDP curve must be given at the accountant's orders")
            if do_compose:
                self._rdp = self._rdp + count * np.asarray(event.rdp, dtype=np.float64)
            return None
        return super()._maybe_compose(event, count, do_compose)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchEpsilon:
    """(ε, δ) of releasing the best trial of a search; `delta` includes the trial cap's (1 + eᵉ)·P(K > cap)."""

    epsilon: float
    delta: float
    trials: TrialCount
    configurations: int


def search_epsilon(
    ledgers: Sequence[PrivacyLedger | None],
    trials: TrialCount,
    *,
    delta: float,
    orders: tuple[float, ...] = DEFAULT_ORDERS,
) -> SearchEpsilon:
    """ε of releasing the best of K trials, each one run of a configuration drawn uniformly from `ledgers` (each
    the whole ledger of that configuration's run; None: not private)."""
    check_delta(delta)
    worst = worst_rdp(ledgers, orders)
    cap = trials.tail()
    if not np.isfinite(worst).any():
        return SearchEpsilon(epsilon=math.inf, delta=delta, trials=trials, configurations=len(ledgers))
    event = dp_event.RepeatAndSelectDpEvent(
        event=RdpCurveDpEvent(orders=tuple(orders), rdp=tuple(float(x) for x in worst)),
        mean=float(trials.mean),
        shape=trials.dp_shape,
    )
    epsilon = float(SearchAccountant(orders=list(orders)).compose(event).get_epsilon(delta))
    total = delta + (1.0 + math.exp(min(epsilon, 700.0))) * cap
    return SearchEpsilon(epsilon=epsilon, delta=total, trials=trials, configurations=len(ledgers))


def composed(ledgers: Sequence[PrivacyLedger]) -> PrivacyLedger:
    """One ledger releasing every one of `ledgers` (as up-front releases; equal events are counted together, so an
    accountant composes them as one self-composition)."""
    if len({ledger.neighboring for ledger in ledgers}) > 1:
        raise NotApplicableError("the runs protect different neighbouring relations")
    counts: dict = {}
    for release in (r for ledger in ledgers for r in ledger.releases if r.count):
        counts[release.event] = counts.get(release.event, 0) + release.count
    releases = tuple(Release(event=event, count=count) for event, count in counts.items())
    return PrivacyLedger(upfront=releases, neighboring=ledgers[0].neighboring if ledgers else PrivacyLedger.neighboring)


def composition_epsilon(ledgers: Sequence[PrivacyLedger | None], *, delta: float) -> tuple[str, float]:
    """(accountant, ε) of releasing every run of `ledgers` (so also of releasing the best one chosen by looking at
    them all): the tightest of `COMPOSITION_ACCOUNTANTS` for their composition; ∞ if one is not private."""
    check_delta(delta)
    if any(ledger is None for ledger in ledgers):
        return "not private", math.inf
    return panel(composed(ledgers), delta=delta, names=COMPOSITION_ACCOUNTANTS, steps=np.array([0])).tightest()

"""PLD accounting (privacy loss distributions; Koskela et al. 2020, Doroshenko et al. 2022), through
`dp_accounting.pld`. The tightest accountant here; its pessimistic discretization keeps it a valid
upper bound at every discretization interval Δ. Pure ε-DP events use the PLD of their worst case
(`from_privacy_parameters`).

The discretization is adaptive: a fixed Δ is loose where the per-step privacy loss is small against Δ
(q = 0.01, σ = 8, 1,000 steps, δ = 1e-5: 0.132 at Δ = 1e-3, 0.1252 at 1e-4). `adaptive_epsilon` halves Δ
from `COARSEST_DISCRETIZATION` until ε moves by less than `CONVERGED` (relative) and Δ is at most
ε/`POINTS_PER_EPSILON`, and reports the smallest ε seen: each is a valid bound, so their minimum is. The
error of a pessimistic PLD shrinks at least linearly in Δ, so a last halving that moved ε by less than 0.1%
leaves it within about 0.1% of the limit Δ → 0. The cost doubles with each halving and the sum over the
ladder is at most twice the last one; the ladder stops at `FINEST_DISCRETIZATION` (and
ε/`MAX_POINTS_PER_EPSILON`), whatever the answer, so the time is bounded (`python -m bench --suite
accounting` measures it). A curve chooses Δ once, at its last step, and reuses it for every step.

Bounded work at every Δ: a subsampled Gaussian step is discretized only when its loss range (`loss_span`) spans
at most `MAX_STEP_POINTS` intervals, and T steps are composed only when the Chernoff bounds of dp_accounting's own
truncation say the result has at most `MAX_COMPOSED_POINTS` points (`PldTooCostlyError` otherwise); ε(δ) is read
off the result vectorized (`pmf_epsilon_for_delta`). A rung too costly ends the ladder with the coarser rungs'
answer; when even Δ = 1e-2 is (tiny σ, many steps, large q), the ladder goes coarser, Δ = 1e-2 · 4ᵏ, and reports
the first ε that fits: a valid bound, if a loose one (a panel still reports the tightest accountant). A ledger of
Gaussian releases that are not subsampled (q = 1) has an exact closed form (`accountants.gaussian`), the limit
Δ → 0 of this accountant: it is used instead, at any T.
"""

import functools
import math

import numpy as np
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.pld import common, pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.signal import lfilter

from engine.privacy.accountants import gaussian
from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.accountants.registry import Accountant, register_accountant
from engine.privacy.errors import NotApplicableError, check_delta
from engine.privacy.events import PureDpEvent
from engine.privacy.ledger import PrivacyLedger

NAME = "pld"
TITLE = "PLD (privacy loss distribution)"
GRID_DISCRETIZATION = 1e-3  # the fixed interval used before the adaptive ladder (kept for comparisons)
COARSEST_DISCRETIZATION = 1e-2  # the ladder's first rung: Δ = 1e-2 · 2⁻ᵏ
FINEST_DISCRETIZATION = 1e-2 * 2.0**-14  # ≈ 6.1e-7: the ladder's last rung
CONVERGED = 1e-3  # stop when halving Δ moved ε by less than this (relative)
POINTS_PER_EPSILON = 50  # ... and Δ ≤ ε/50: never believe two coarse rungs that happen to agree
MAX_POINTS_PER_EPSILON = 200_000  # a cost cap: no rung finer than ε/200,000
MAX_STEP_POINTS = 50_000  # one subsampled Gaussian step's PLD (dp_accounting builds ~50,000 points a second)
MAX_COMPOSED_POINTS = 2_000_000  # T steps composed by FFT (~80 bytes a point while composing: ~160 MB)
COARSER_RUNGS = 8  # when Δ = 1e-2 is too costly: Δ = 1e-2 · 4ᵏ for k = 1..8 (up to 655; e^Δ must not overflow)
TAIL_MASS_TRUNCATION = 1e-15  # dp_accounting's default for self-composition
ROUNDING_MARGIN = 1e-9  # δ(ε) summed over up to MAX_COMPOSED_POINTS terms is accurate to far better than this


class PldTooCostlyError(NotApplicableError):
    """The PLD at this discretization would need more points than this accountant allows."""


def loss_span(sigma: float, sampling_rate: float = 1.0) -> float:
    """About the width of a Poisson-subsampled Gaussian's privacy-loss range as dp_accounting truncates it (tail
    mass 1e-15, the noise within about ±10σ): the Gaussian's loss ℓ lies within ±ℓ₊, ℓ₊ = (1 + 20σ)/(2σ²), and
    subsampling at rate q maps it into [log(1 − q), log(1 − q + q·e^ℓ₊)]."""
    top = (1.0 + 20.0 * sigma) / (2.0 * sigma**2)
    if sampling_rate >= 1.0:
        return 2.0 * top
    low = math.log1p(-sampling_rate)
    return min(2.0 * top, float(np.logaddexp(low, math.log(sampling_rate) + top)) - low)


def step_discretization(sigma: float, sampling_rate: float, finest: float) -> float:
    """The finest interval ≥ `finest` at which one step of noise multiplier σ at rate q has at most
    MAX_STEP_POINTS points."""
    return max(finest, loss_span(sigma, sampling_rate) / MAX_STEP_POINTS * (1.0 + 1e-9))  # the check's rounding


@functools.lru_cache(maxsize=32)
def subsampled_gaussian_step(
    sigma: float, sampling_rate: float, discretization: float, neighboring: NeighboringRelation
) -> pld_lib.PrivacyLossDistribution:
    """One Poisson-subsampled Gaussian step's PLD. Memoized: a curve composes the same step for every step count
    it shows, and building it is half the cost of each (composing returns new objects; this one is never changed)."""
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=sigma,
        value_discretization_interval=discretization,
        sampling_prob=sampling_rate,
        neighboring_relation=neighboring,
    )


def self_composed(distribution: pld_lib.PrivacyLossDistribution, count: int) -> pld_lib.PrivacyLossDistribution:
    """`count` compositions of a PLD, refused (PldTooCostlyError) before the FFT when the result would have more
    than MAX_COMPOSED_POINTS points. A PMF is made dense first: dp_accounting composes a one-point sparse PMF
    by `count` Python-level convolutions."""
    if count == 1:
        return distribution
    symmetric = distribution._symmetric
    pmfs = [distribution._pmf_remove] + ([] if symmetric else [distribution._pmf_add])
    composed = []
    for pmf in pmfs:
        dense = pmf.to_dense_pmf()
        low, high = common.compute_self_convolve_bounds(dense._probs, count, TAIL_MASS_TRUNCATION)
        if high - low + 1 > MAX_COMPOSED_POINTS:
            raise PldTooCostlyError(
                f"the PLD of {count:,} steps would need {high - low + 1:,} points at this discretization, more "
                f"than the {MAX_COMPOSED_POINTS:,} allowed"
            )
        composed.append(dense.self_compose(count, TAIL_MASS_TRUNCATION))
    return pld_lib.PrivacyLossDistribution(composed[0], None if symmetric else composed[1])


class PldAccountant(pld_privacy_accountant.PLDAccountant):
    """dp_accounting's PLD accountant, also accepting `PureDpEvent`, and exposing its PLD."""

    def _maybe_compose(self, event, count, do_compose):
        if (
            isinstance(event, dp_event.PoissonSampledDpEvent)
            and isinstance(event.event, dp_event.GaussianDpEvent)
            and event.sampling_probability > 0
            and event.event.noise_multiplier > 0
        ):
            if do_compose:
                sigma = event.event.noise_multiplier
                points = loss_span(sigma, event.sampling_probability) / self._value_discretization_interval
                if points > MAX_STEP_POINTS:
                    raise PldTooCostlyError(
                        f"one step's PLD at σ={sigma:g} would need about {points:,.0f} points at this "
                        f"discretization, more than the {MAX_STEP_POINTS:,} allowed"
                    )
                step = subsampled_gaussian_step(
                    sigma, event.sampling_probability, self._value_discretization_interval, self.neighboring_relation
                )
                self._pld = self._pld.compose(self_composed(step, count))
            return None
        if isinstance(event, PureDpEvent):
            if do_compose:
                worst_case = pld_lib.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(epsilon=event.epsilon, delta=0.0),
                    value_discretization_interval=self._value_discretization_interval,
                )
                self._pld = self._pld.compose(self_composed(worst_case, count))
            return None
        return super()._maybe_compose(event, count, do_compose)

    @property
    def pld(self) -> pld_lib.PrivacyLossDistribution:
        return self._pld


def epsilon_at(ledger: PrivacyLedger, *, delta: float, discretization: float) -> float:
    """ε(δ) of the whole ledger by dp_accounting's PLD at one discretization interval (a valid upper bound); exact
    for a ledger of Gaussian releases that are not subsampled."""
    check_delta(delta)
    exact = gaussian.epsilons(ledger, delta=delta, steps=[ledger.steps])
    if exact is not None:
        return float(exact[0])
    accountant = PldAccountant(neighboring_relation=ledger.neighboring, value_discretization_interval=discretization)
    event = ledger.dp_event()
    if not accountant.supports(event):
        raise NotApplicableError("the PLD accountant does not support this mechanism under this adjacency")
    return epsilon_for_delta(accountant.compose(event).pld, delta)


def pmf_epsilon_for_delta(pmf, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ δ for a discretized PLD's PMF, as dp_accounting's `get_epsilon_for_delta`
    computes it, vectorized (the library's is a Python loop over up to MAX_COMPOSED_POINTS values). With losses
    L_i = (k + i)Δ, probabilities p_i and mass m at +∞, δ(L_j) = m + Σ_{i>j} p_i (1 − e^{−(i−j)Δ}): a suffix sum
    less a discounted suffix sum (a first-order recursion with factor e^{−Δ} < 1, no overflow). The first L_j with
    δ(L_j) ≤ δ bounds ε; below it, on (L_{j−1}, L_j], δ(L_j − t) = m + A_j − e^{−t} D_j (A_j = Σ_{i≥j} p_i,
    D_j = Σ_{i≥j} p_i e^{−(i−j)Δ}) is solved for t, and t is shortened by a margin that covers its rounding."""
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=np.float64)
    interval, lowest, infinity_mass = dense._discretization, dense._lower_loss, dense._infinity_mass
    if infinity_mass > delta:
        return math.inf
    reversed_probs = probs[::-1]
    above = np.concatenate([np.cumsum(reversed_probs)[::-1][1:], [0.0]])  # Σ_{i>j} p_i
    discounted = lfilter([1.0], [1.0, -math.exp(-interval)], reversed_probs)[::-1]  # Σ_{i≥j} p_i e^{−(i−j)Δ}
    discounted_above = np.concatenate([discounted[1:], [0.0]]) * math.exp(-interval)  # Σ_{i>j} p_i e^{−(i−j)Δ}
    deltas = infinity_mass + np.maximum(above - discounted_above, 0.0)
    fits = np.flatnonzero(deltas * (1.0 + ROUNDING_MARGIN) <= delta)
    if len(fits) == 0:
        return math.inf
    j = int(fits[0])
    at_grid = (lowest + j) * interval
    slack = infinity_mass + above[j] + probs[j] - delta  # m + A_j − δ
    if slack <= 0 or discounted[j] <= 0:
        return max(0.0, at_grid) if slack > 0 else 0.0
    t = math.log(discounted[j]) - math.log(slack)  # ≥ 0 up to rounding: δ(L_j) ≤ δ
    t = max(0.0, t * (1.0 - 1e-6) - 1e-12)
    if j > 0:
        t = min(t, interval)  # δ(L_{j−1}) > δ: the answer lies above L_{j−1}
    return max(0.0, at_grid - t)


def epsilon_for_delta(distribution: pld_lib.PrivacyLossDistribution, delta: float) -> float:
    """ε(δ) of a PLD: the larger of its two directions' (`pmf_epsilon_for_delta`)."""
    pmfs = [distribution._pmf_remove] + ([] if distribution._symmetric else [distribution._pmf_add])
    return max(pmf_epsilon_for_delta(pmf, delta) for pmf in pmfs)


def ladder() -> list[float]:
    """The discretization intervals tried, coarsest first: 1e-2 · 2⁻ᵏ down to FINEST_DISCRETIZATION."""
    rungs = [COARSEST_DISCRETIZATION]
    while rungs[-1] / 2 >= FINEST_DISCRETIZATION * (1 - 1e-12):
        rungs.append(rungs[-1] / 2)
    return rungs


def converged(coarse: float, fine: float, discretization: float) -> bool:
    """Whether halving Δ to `discretization` (giving ε = `fine`, from `coarse`) settles ε."""
    if fine == 0.0 or (math.isinf(fine) and math.isinf(coarse)):
        return True  # nothing tighter than 0; an infinite ε at two rungs is mass at infinity, not rounding
    return abs(coarse - fine) <= CONVERGED * fine and discretization <= fine / POINTS_PER_EPSILON


def adaptive_epsilon(ledger: PrivacyLedger, *, delta: float) -> tuple[float, float]:
    """(ε, Δ): the smallest ε(δ) over the ladder of intervals tried, and the last (finest) interval tried.
    A rung too costly to compute ends the ladder (coarser rungs answered); if the first one is, `coarser_epsilon`
    answers. Memoized: a finished run asks again for its Δ (`engine.privacy.tradeoff`) after its panel."""
    try:
        return _adaptive_epsilon(ledger, delta)
    except TypeError:  # a ledger that is not hashable
        return _adaptive_epsilon.__wrapped__(ledger, delta)


@functools.lru_cache(maxsize=32)
def _adaptive_epsilon(ledger: PrivacyLedger, delta: float) -> tuple[float, float]:
    check_delta(delta)
    exact = gaussian.epsilons(ledger, delta=delta, steps=[ledger.steps])
    if exact is not None:
        return float(exact[0]), COARSEST_DISCRETIZATION  # no discretization: the closed form is exact
    previous, best, discretization = math.inf, math.inf, COARSEST_DISCRETIZATION
    for rung in ladder():
        try:
            epsilon = epsilon_at(ledger, delta=delta, discretization=rung)
        except PldTooCostlyError:
            if rung == COARSEST_DISCRETIZATION:
                return coarser_epsilon(ledger, delta=delta)
            break
        discretization = rung
        best = min(best, epsilon)
        if converged(previous, epsilon, discretization) or discretization * MAX_POINTS_PER_EPSILON < best:
            break
        previous = epsilon
    return best, discretization


def coarser_epsilon(ledger: PrivacyLedger, *, delta: float) -> tuple[float, float]:
    """(ε, Δ) at the finest of Δ = 1e-2 · 4ᵏ (k = 1..COARSER_RUNGS) whose PLD is within the point budgets."""
    last_error = None
    for k in range(1, COARSER_RUNGS + 1):
        discretization = COARSEST_DISCRETIZATION * 4.0**k
        try:
            return epsilon_at(ledger, delta=delta, discretization=discretization), discretization
        except PldTooCostlyError as exc:
            last_error = exc
    raise PldTooCostlyError(f"no PLD within this accountant's cost bounds: {last_error}")


def choose_discretization(ledger: PrivacyLedger, *, delta: float) -> float:
    """The interval `adaptive_epsilon` settles on for this ledger: reuse it for its shorter truncations."""
    return adaptive_epsilon(ledger, delta=delta)[1]


def epsilon_of(ledger: PrivacyLedger, *, delta: float, discretization: float | None = None) -> float:
    """ε(δ) by PLD: at the given interval, or (default) the adaptive one."""
    if discretization is None:
        return adaptive_epsilon(ledger, delta=delta)[0]
    return epsilon_at(ledger, delta=delta, discretization=discretization)


def grid(total_steps: int, points: int = 20) -> np.ndarray:
    """Up to `points` step counts from 1 to T, denser early where ε grows fastest, always ending at T."""
    if total_steps <= points:
        return np.arange(1, total_steps + 1)
    return np.unique(np.geomspace(1, total_steps, points).round().astype(np.int64))


def curve(
    ledger: PrivacyLedger,
    *,
    delta: float,
    steps: np.ndarray | None = None,
    discretization: float | None = None,
) -> EpsilonCurve:
    """ε after each of `steps` (default: `grid`). Unless `discretization` is given, the adaptive interval of
    the last queried step is chosen once and used at every step; the last step reports the adaptive ε."""
    steps = grid(ledger.steps) if steps is None else np.asarray(steps, dtype=np.int64)
    if len(steps) == 0:
        return EpsilonCurve(accountant=NAME, delta=delta, steps=steps, epsilons=np.zeros(0))
    last = int(steps.max())
    if discretization is None:
        last_epsilon, discretization = adaptive_epsilon(ledger.truncated(last), delta=delta)
    else:
        last_epsilon = epsilon_at(ledger.truncated(last), delta=delta, discretization=discretization)

    def at(t: int) -> float:
        return (
            last_epsilon if t == last else epsilon_at(ledger.truncated(t), delta=delta, discretization=discretization)
        )

    eps = np.array([at(int(t)) for t in steps])
    return EpsilonCurve(accountant=NAME, delta=delta, steps=steps, epsilons=eps)


register_accountant(
    Accountant(
        name=NAME,
        label="PLD",
        title=TITLE,
        citation="Koskela et al. 2020; Doroshenko et al. 2022 (dp-accounting)",
        curve=curve,
        live=False,  # ~0.1–1 s a point: drawn point by point, last,
    )
)

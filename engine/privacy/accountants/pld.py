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
"""

import math

import numpy as np
from dp_accounting.pld import common, pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from engine.privacy.accountants.curve import EpsilonCurve
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


class PldAccountant(pld_privacy_accountant.PLDAccountant):
    """dp_accounting's PLD accountant, also accepting `PureDpEvent`, and exposing its PLD."""

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, PureDpEvent):
            if do_compose:
                worst_case = pld_lib.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(epsilon=event.epsilon, delta=0.0),
                    value_discretization_interval=self._value_discretization_interval,
                )
                self._pld = self._pld.compose(worst_case.self_compose(count))
            return None
        return super()._maybe_compose(event, count, do_compose)

    @property
    def pld(self) -> pld_lib.PrivacyLossDistribution:
        return self._pld


def epsilon_at(ledger: PrivacyLedger, *, delta: float, discretization: float) -> float:
    """ε(δ) of the whole ledger by dp_accounting's PLD at one discretization interval (a valid upper bound)."""
    check_delta(delta)
    accountant = PldAccountant(neighboring_relation=ledger.neighboring, value_discretization_interval=discretization)
    event = ledger.dp_event()
    if not accountant.supports(event):
        raise NotApplicableError("the PLD accountant does not support this mechanism under this adjacency")
    return float(accountant.compose(event).get_epsilon(delta))


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
    """(ε, Δ): the smallest ε(δ) over the ladder of intervals tried, and the last (finest) interval tried."""
    previous, best, discretization = math.inf, math.inf, COARSEST_DISCRETIZATION
    for discretization in ladder():
        epsilon = epsilon_at(ledger, delta=delta, discretization=discretization)
        best = min(best, epsilon)
        if converged(previous, epsilon, discretization) or discretization * MAX_POINTS_PER_EPSILON < best:
            break
        previous = epsilon
    return best, discretization


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

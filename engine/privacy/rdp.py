"""RDP accounting (the moments accountant of seed 001, as Rényi DP of the sampled Gaussian).

`dp_accounting.rdp.RdpAccountant` computes the RDP of one step at every order; composition over
steps is addition, so the RDP after step t is t·rdp₁ and the ε of *every* step of a run comes
from one (steps × orders) array. The RDP → (ε, δ) conversion is the one `dp_accounting` uses
(Canonne, Kamath, Steinke 2020, Prop. 12 / Asoodeh et al. 2020, Eq. 20), vectorized here over
steps and orders; tests check it equals `RdpAccountant.get_epsilon` exactly.
"""

from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from engine.privacy.errors import PrivacyError

DEFAULT_ORDERS: tuple[float, ...] = tuple(float(a) for a in rdp_lib.DEFAULT_RDP_ORDERS)


@dataclass(frozen=True, kw_only=True)
class EpsilonCurve:
    """ε(δ) after each step 1..T of a run, with the RDP order that attains each value."""

    delta: float
    epsilons: np.ndarray
    best_orders: np.ndarray
    orders: tuple[float, ...]

    @property
    def final_epsilon(self) -> float:
        return float(self.epsilons[-1]) if len(self.epsilons) else 0.0

    @property
    def final_order(self) -> float:
        return float(self.best_orders[-1]) if len(self.best_orders) else float("nan")

    @property
    def order_at_edge(self) -> bool:
        """True when the final best order is the smallest or largest order searched."""
        return bool(len(self.best_orders)) and self.final_order in (self.orders[0], self.orders[-1])


def step_rdp(step_event: dp_event.DpEvent, orders: tuple[float, ...] = DEFAULT_ORDERS) -> np.ndarray:
    """The RDP of one occurrence of `step_event` at each order, from dp_accounting."""
    accountant = rdp_lib.RdpAccountant(orders=list(orders))
    if not accountant.supports(step_event):
        raise PrivacyError(f"the RDP accountant does not support {type(step_event).__name__}")
    return np.asarray(accountant.compose(step_event).rdp, dtype=np.float64)


def epsilons_from_rdp(rdp: np.ndarray, orders: tuple[float, ...], delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized `rdp_privacy_accountant.compute_epsilon` over the rows of `rdp` (steps × orders)."""
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in (0, 1), got {delta}")
    a = np.asarray(orders, dtype=np.float64)[None, :]
    rdp = np.atleast_2d(rdp)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / a) - np.log(delta * a) / (a - 1.0)
        eps = np.where(a > 1.01, eps, np.inf)
        # KL bound: δ ≤ sqrt(1 - exp(-rdp)) means ε = 0 already suffices at this order.
        eps = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, eps)
        eps = np.where(rdp < 0, 0.0, eps)
    best = np.argmin(eps, axis=1)
    rows = np.arange(eps.shape[0])
    return np.maximum(0.0, eps[rows, best]), a[0, best]


def rdp_epsilon_curve(
    step_event: dp_event.DpEvent,
    *,
    steps: int,
    delta: float,
    orders: tuple[float, ...] = DEFAULT_ORDERS,
) -> EpsilonCurve:
    """ε after each of `steps` identical steps. 10,000 steps cost milliseconds."""
    if steps == 0:
        return EpsilonCurve(delta=delta, epsilons=np.zeros(0), best_orders=np.zeros(0), orders=orders)
    per_step = step_rdp(step_event, orders)
    cumulative = np.arange(1, steps + 1, dtype=np.float64)[:, None] * per_step[None, :]
    eps, best = epsilons_from_rdp(cumulative, orders, delta)
    return EpsilonCurve(delta=delta, epsilons=eps, best_orders=best, orders=orders)


def rdp_epsilon(
    event: dp_event.DpEvent, *, delta: float, orders: tuple[float, ...] = DEFAULT_ORDERS
) -> tuple[float, float]:
    """(ε, best order) of a whole event, straight from dp_accounting's RdpAccountant."""
    accountant = rdp_lib.RdpAccountant(orders=list(orders))
    if not accountant.supports(event):
        raise PrivacyError(f"the RDP accountant does not support {type(event).__name__}")
    eps, order = accountant.compose(event).get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)

"""RDP accounting (the moments accountant of Abadi et al. 2016, as Rényi DP of the sampled Gaussian).

`dp_accounting.rdp.RdpAccountant` gives each release's RDP at every order; composition adds RDP,
so the RDP after step t is a (steps × releases) count matrix times the (releases × orders) RDP
matrix, and ε at every step follows from one vectorized conversion, the one `dp_accounting` uses
(Canonne, Kamath, Steinke 2020, Prop. 12; Asoodeh et al. 2020, Eq. 20). Tests check equality with
`RdpAccountant.get_epsilon`. Pure ε-DP events (`PureDpEvent`) are (α, min(ε, αε²/2))-RDP
(Mironov 2017, Prop. 3; Bun & Steinke 2016, Prop. 1.4).
"""

import functools

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.errors import NotApplicableError, check_delta
from engine.privacy.events import PureDpEvent
from engine.privacy.ledger import PrivacyLedger

NAME = "rdp"
TITLE = "RDP (moments accountant)"
DEFAULT_ORDERS: tuple[float, ...] = tuple(float(a) for a in rdp_lib.DEFAULT_RDP_ORDERS)


class RdpAccountant(rdp_lib.RdpAccountant):
    """dp_accounting's RDP accountant, also accepting `PureDpEvent`."""

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, PureDpEvent):
            if do_compose:
                self._rdp += count * np.minimum(event.epsilon, self._orders * event.epsilon**2 / 2)
            return None
        return super()._maybe_compose(event, count, do_compose)


def release_rdp(event: dp_event.DpEvent, ledger: PrivacyLedger, orders: tuple[float, ...]) -> np.ndarray:
    """The RDP of one release at each order. Memoized: a run's plan, live curve and final panel ask
    for the same events, and a subsampled Gaussian at small σ costs ~0.5 s in dp_accounting."""
    try:
        return _release_rdp(event, ledger.neighboring, tuple(orders))
    except TypeError:  # an event that is not hashable: compute it directly
        return _release_rdp.__wrapped__(event, ledger.neighboring, tuple(orders))


@functools.lru_cache(maxsize=1024)
def _release_rdp(event: dp_event.DpEvent, neighboring, orders: tuple[float, ...]) -> np.ndarray:
    accountant = RdpAccountant(orders=list(orders), neighboring_relation=neighboring)
    if not accountant.supports(event):
        raise NotApplicableError(f"the RDP accountant does not support {type(event).__name__} here")
    rdp = np.asarray(accountant.compose(event).rdp, dtype=np.float64)
    rdp.flags.writeable = False  # shared by every caller of the cache
    return rdp


def epsilons_from_rdp(rdp: np.ndarray, orders: tuple[float, ...], delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized `rdp_privacy_accountant.compute_epsilon` over the rows of `rdp` (steps × orders)."""
    check_delta(delta)
    a = np.asarray(orders, dtype=np.float64)[None, :]
    rdp = np.atleast_2d(rdp)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / a) - np.log(delta * a) / (a - 1.0)
        eps = np.where(a > 1.01, eps, np.inf)
        # KL bound: δ ≥ sqrt(1 - exp(-rdp)) means ε = 0 already suffices at this order.
        eps = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, eps)
        eps = np.where(rdp < 0, 0.0, eps)
    best = np.argmin(eps, axis=1)
    rows = np.arange(eps.shape[0])
    return np.maximum(0.0, eps[rows, best]), a[0, best]


def compose_counts(counts: np.ndarray, per_release: np.ndarray) -> np.ndarray:
    """(steps × orders) RDP of compositions: `counts` (steps × releases) occurrences of releases whose
    one-occurrence RDP is `per_release` (releases × orders). An uncharged release (count 0) adds exactly 0,
    even where its RDP is ∞; a charged release that is ∞ (or NaN, a failed computation) at an order makes
    that order ∞ for the whole composition. (A plain matrix product gives 0 × ∞ = NaN, which poisons the
    whole sum at that order.)"""
    counts = np.asarray(counts, dtype=np.float64)
    unbounded = ~np.isfinite(per_release)  # RDP is never -∞; NaN is read as "no bound" at that order
    cumulative = counts @ np.where(unbounded, 0.0, per_release)
    charged_unbounded = (counts > 0).astype(np.float64) @ unbounded.astype(np.float64) > 0
    return np.where(charged_unbounded, np.inf, cumulative)


def cumulative_rdp(ledger: PrivacyLedger, steps, orders: tuple[float, ...] = DEFAULT_ORDERS) -> np.ndarray:
    """(len(steps) × orders) RDP of the ledger after each of `steps` (every up-front release included)."""
    if not ledger.releases:
        return np.zeros((len(steps), len(orders)))
    per_release = np.stack([release_rdp(r.event, ledger, orders) for r in ledger.releases])
    return compose_counts(ledger.counts_at(steps), per_release)


def curve(
    ledger: PrivacyLedger,
    *,
    delta: float,
    steps: np.ndarray | None = None,
    orders: tuple[float, ...] = DEFAULT_ORDERS,
) -> EpsilonCurve:
    """ε after each of `steps` (default: every step 1..T). 10,000 steps cost about 0.1 s."""
    steps = ledger.queried_steps(steps)
    if not ledger.releases or len(steps) == 0:
        zeros = np.zeros(len(steps))
        return EpsilonCurve(accountant=NAME, delta=delta, steps=steps, epsilons=zeros, best_orders=zeros)
    cumulative = cumulative_rdp(ledger, steps, orders)
    eps, best = epsilons_from_rdp(cumulative, orders, delta)
    return EpsilonCurve(
        accountant=NAME, delta=delta, steps=steps, epsilons=eps, best_orders=best, order_edges=(orders[0], orders[-1])
    )


def epsilon(
    event: dp_event.DpEvent, *, delta: float, orders: tuple[float, ...] = DEFAULT_ORDERS
) -> tuple[float, float]:
    """(ε, best order) of a whole event, straight from dp_accounting's RdpAccountant."""
    accountant = RdpAccountant(orders=list(orders))
    if not accountant.supports(event):
        raise NotApplicableError(f"the RDP accountant does not support {type(event).__name__}")
    eps, order = accountant.compose(event).get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)

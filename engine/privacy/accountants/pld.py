"""PLD accounting (privacy loss distributions; Koskela et al. 2020, Doroshenko et al. 2022), through
`dp_accounting.pld`. The tightest accountant here; its pessimistic discretization keeps it a valid
upper bound. Each queried step costs a composition (~0.1–0.35 s), so curves are computed on a grid
of steps, off the UI thread. Pure ε-DP events use the PLD of their worst case (`from_privacy_parameters`).
"""

import numpy as np
from dp_accounting.pld import common, pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.errors import NotApplicableError, check_delta
from engine.privacy.events import PureDpEvent
from engine.privacy.ledger import PrivacyLedger

NAME = "pld"
TITLE = "PLD (privacy loss distribution)"
GRID_DISCRETIZATION = 1e-3  # ε loses < 0.5% against 1e-4 at 1/6 of the cost; still an upper bound


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


def epsilon_of(ledger: PrivacyLedger, *, delta: float, discretization: float = GRID_DISCRETIZATION) -> float:
    check_delta(delta)
    accountant = PldAccountant(neighboring_relation=ledger.neighboring, value_discretization_interval=discretization)
    event = ledger.dp_event()
    if not accountant.supports(event):
        raise NotApplicableError("the PLD accountant does not support this mechanism under this adjacency")
    return float(accountant.compose(event).get_epsilon(delta))


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
    discretization: float = GRID_DISCRETIZATION,
) -> EpsilonCurve:
    steps = grid(ledger.steps) if steps is None else np.asarray(steps, dtype=np.int64)
    eps = np.array([epsilon_of(ledger.truncated(int(t)), delta=delta, discretization=discretization) for t in steps])
    return EpsilonCurve(accountant=NAME, delta=delta, steps=steps, epsilons=eps)

"""Every accountant, side by side, for the same ledger. Each is registered (`registry.register_accountant`) with a
pure function `curve(ledger, delta=, steps=) -> EpsilonCurve` giving a valid upper bound on ε(δ) after each
queried number of steps; the panel reports the tightest one and shows the others beside it. Importing the package
installs `library_logs`: the libraries' repeated warnings never flood a terminal or a server log."""

from dataclasses import dataclass

import numpy as np

from engine.privacy.accountants import library_logs
from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.accountants.registry import (
    ACCOUNTANTS,
    Accountant,
    accountant,
    describe_accountants,
    register_accountant,
    registered_accountant,
    unregister_accountant,
)
from engine.privacy.errors import NotApplicableError
from engine.privacy.ledger import PrivacyLedger

# The accountants, each registered by its own module as it is imported: this order is the order every page,
# table and command lists them in. A new accountant is a module here that calls `register_accountant`, and its
# line below.
# isort: off
from engine.privacy.accountants import rdp
from engine.privacy.accountants import pld
from engine.privacy.accountants import composition
from engine.privacy.accountants import zcdp
from engine.privacy.accountants import optimal_pure
# isort: on

library_logs.install()


@dataclass(frozen=True, kw_only=True)
class Panel:
    delta: float
    curves: dict[str, EpsilonCurve]
    not_applicable: dict[str, str]  # accountant → why it has no valid answer here

    def final(self) -> dict[str, float]:
        return {name: c.final_epsilon for name, c in self.curves.items()}

    def tightest(self) -> tuple[str, float]:
        """The accountant with the smallest final ε; every one is a valid bound, so the minimum is."""
        if not self.curves:
            raise NotApplicableError("no accountant applies: " + "; ".join(self.not_applicable.values()))
        return min(self.final().items(), key=lambda item: item[1])


def panel(
    ledger: PrivacyLedger,
    *,
    delta: float,
    names: tuple[str, ...] | None = None,
    steps: np.ndarray | None = None,
) -> Panel:
    """Every named accountant's curve (default: every registered one, as registered now) at `steps` (default: the
    final step only)."""
    names = tuple(ACCOUNTANTS) if names is None else names
    steps = np.array([ledger.steps]) if steps is None else np.asarray(steps, dtype=np.int64)
    curves, missing = {}, {}
    for name in names:
        try:
            curves[name] = accountant(name).curve(ledger, delta=delta, steps=steps)
        except NotApplicableError as exc:
            missing[name] = str(exc)
    return Panel(delta=delta, curves=curves, not_applicable=missing)


__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "EpsilonCurve",
    "Panel",
    "accountant",
    "composition",
    "describe_accountants",
    "optimal_pure",
    "panel",
    "pld",
    "rdp",
    "register_accountant",
    "registered_accountant",
    "unregister_accountant",
    "zcdp",
]

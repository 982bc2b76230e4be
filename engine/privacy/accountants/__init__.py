"""Every accountant, side by side, for the same ledger. Each is a pure function
`curve(ledger, delta=, steps=) -> EpsilonCurve` giving a valid upper bound on ε(δ) after each
queried number of steps; the panel reports the tightest one and shows the others beside it. Importing the package
installs `library_logs`: the libraries' repeated warnings never flood a terminal or a server log."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.privacy.accountants import composition, library_logs, optimal_pure, pld, rdp, zcdp
from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.errors import NotApplicableError, PrivacyError
from engine.privacy.ledger import PrivacyLedger

library_logs.install()


@dataclass(frozen=True, kw_only=True)
class Accountant:
    name: str
    short: str
    title: str
    citation: str
    curve: Callable[..., EpsilonCurve]


ACCOUNTANTS: dict[str, Accountant] = {
    a.name: a
    for a in (
        Accountant(
            name="rdp",
            short="RDP",
            title=rdp.TITLE,
            curve=rdp.curve,
            citation="Mironov 2017; Abadi et al. 2016; conversion: Canonne et al. 2020",
        ),
        Accountant(
            name="pld",
            short="PLD",
            title=pld.TITLE,
            curve=pld.curve,
            citation="Koskela et al. 2020; Doroshenko et al. 2022 (dp-accounting)",
        ),
        Accountant(
            name="naive",
            short="naive",
            title="Naive composition (kε, kδ)",
            curve=composition.naive_curve,
            citation="Dwork & Roth 2014, Thm 3.16",
        ),
        Accountant(
            name="advanced",
            short="advanced",
            title="Advanced composition",
            curve=composition.advanced_curve,
            citation="Dwork & Roth 2014, Thm 3.20",
        ),
        Accountant(
            name="zcdp",
            short="zCDP",
            title=zcdp.TITLE,
            curve=zcdp.curve,
            citation="Bun & Steinke 2016, Props 1.3, 1.4, 1.6",
        ),
        Accountant(
            name=optimal_pure.NAME,
            short="optimal",
            title=optimal_pure.TITLE,
            curve=optimal_pure.curve,
            citation="Kairouz, Oh & Viswanath 2015, Thm 3.3; Murtagh & Vadhan 2016",
        ),
    )
}


def accountant(name: str) -> Accountant:
    try:
        return ACCOUNTANTS[name]
    except KeyError:
        raise PrivacyError(f"accountant must be one of {', '.join(ACCOUNTANTS)}; got {name!r}") from None


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
    names: tuple[str, ...] = tuple(ACCOUNTANTS),
    steps: np.ndarray | None = None,
) -> Panel:
    """Every named accountant's curve at `steps` (default: the final step only)."""
    steps = np.array([ledger.steps]) if steps is None else np.asarray(steps, dtype=np.int64)
    curves, missing = {}, {}
    for name in names:
        try:
            curves[name] = accountant(name).curve(ledger, delta=delta, steps=steps)
        except NotApplicableError as exc:
            missing[name] = str(exc)
    return Panel(delta=delta, curves=curves, not_applicable=missing)


__all__ = ["ACCOUNTANTS", "Accountant", "EpsilonCurve", "Panel", "accountant", "panel"]

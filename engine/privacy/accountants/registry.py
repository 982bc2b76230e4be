"""The accountants the lab knows, in the order every page, table and command lists them: each accountant's module
calls `register_accountant` when the package imports it (`engine.privacy.accountants.__init__` imports them in
that order). The dashboard reads the label, title and citation of each from here, so a new accountant shows up on
every page without a second table. The mechanism is `engine.registry.Registry`'s."""

from collections.abc import Callable
from dataclasses import dataclass

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.errors import PrivacyError
from engine.registry import Registry


@dataclass(frozen=True, kw_only=True)
class Accountant:
    name: str  # its key: in specs, results, the command line and the metric `epsilon_<name>`
    label: str  # how a legend or a short note names it: "RDP", "naive composition"
    title: str  # how a table or a statement names it: "RDP (moments accountant)"
    citation: str  # the theorem or paper its bound rests on
    curve: Callable[..., EpsilonCurve]  # (ledger, *, delta, steps=None) -> a valid upper bound on ε(δ) per step
    live: bool  # cheap enough to draw as a live curve while a run trains (else computed point by point, last)


ACCOUNTANTS: Registry[Accountant] = Registry(kind="accountant", taken=PrivacyError, unknown=PrivacyError)
register_accountant = ACCOUNTANTS.register
unregister_accountant = ACCOUNTANTS.unregister
registered_accountant = ACCOUNTANTS.registered
accountant = ACCOUNTANTS.entry


def describe_accountants() -> list[dict]:
    """Every accountant for `python -m engine accountants`, as JSON-able dicts, in the registry's order."""
    return [
        {
            "name": a.name,
            "label": a.label,
            "description": a.title,
            "source": a.citation,
            "live": a.live,
        }
        for a in ACCOUNTANTS.values()
    ]

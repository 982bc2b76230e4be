"""The accountants the lab knows, in the order every page, table and command lists them: each accountant's module
calls `register_accountant` when the package imports it (`engine.privacy.accountants.__init__` imports them in
that order). The dashboard reads the label, title and citation of each from here, so a new accountant shows up on
every page without a second table."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.errors import PrivacyError


@dataclass(frozen=True, kw_only=True)
class Accountant:
    name: str  # its key: in specs, results, the command line and the metric `epsilon_<name>`
    label: str  # how a legend or a short note names it: "RDP", "naive composition"
    title: str  # how a table or a statement names it: "RDP (moments accountant)"
    citation: str  # the theorem or paper its bound rests on
    curve: Callable[..., EpsilonCurve]  # (ledger, *, delta, steps=None) -> a valid upper bound on ε(δ) per step
    live: bool  # cheap enough to draw as a live curve while a run trains (else computed point by point, last)


ACCOUNTANTS: dict[str, Accountant] = {}


def register_accountant(entry: Accountant) -> Accountant:
    """Add an accountant (after those already registered); a name already taken is an error."""
    if entry.name in ACCOUNTANTS:
        raise PrivacyError(f"an accountant named {entry.name!r} is already registered")
    ACCOUNTANTS[entry.name] = entry
    return entry


def unregister_accountant(name: str) -> None:
    """Remove an accountant (a test's throwaway one); an unknown name does nothing."""
    ACCOUNTANTS.pop(name, None)


@contextmanager
def registered_accountant(entry: Accountant) -> Iterator[Accountant]:
    """`entry` registered for the duration of a `with` block, removed afterwards."""
    register_accountant(entry)
    try:
        yield entry
    finally:
        unregister_accountant(entry.name)


def accountant(name: str) -> Accountant:
    try:
        return ACCOUNTANTS[name]
    except KeyError:
        raise PrivacyError(f"accountant must be one of {', '.join(ACCOUNTANTS)}; got {name!r}") from None


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

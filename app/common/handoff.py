"""Carrying a configuration from one page to another. Pages never import each other's parts, so this is their one
meeting point, in two ways:

- a handoff ("Train this plan", "Sweep around this run"): the sending page leaves spec keys for the receiving
  page's form and switches to it; the form takes them on its next run;
- the shared configuration: the Plan, Train and Sweep forms describe one configuration (dataset, model, algorithm,
  how privacy is set, target ε, σ, δ, C, L, epochs, learning rate, seed). A value changed on one page is the
  value the others start from when they are next drawn; each page takes the values it can show and keeps its own
  for the rest (a Plan slider has no 2.5 epochs, the Sweep's base no CNN).

The shared values are spec keys (`privacy_by`: "target", "sigma" or "fill"), kept in the session state, so they
survive page switches; a reload starts from the Train page's link (`?config=`)."""

import math
from collections.abc import Mapping
from typing import Any

import streamlit as st

TRAIN, SWEEP, PLAN = "train", "sweep", "plan"  # the forms
PAGES = {TRAIN: "views/train.py", SWEEP: "views/sweep.py"}
TITLES = {TRAIN: "Train", SWEEP: "Sweep", PLAN: "Plan"}
SHARED = "shared_configuration"  # spec key → the value the form that last changed it holds
SHARED_BY = "shared_configuration_by"  # the form that last changed a shared value
SHARED_KEYS = (
    "dataset",
    "model",
    "algorithm",
    "privacy_by",
    "target_epsilon",
    "noise_multiplier",
    "delta",
    "clip_norm",
    "lot_size",
    "epochs",
    "lr",
    "seed",
)
MISSING = object()


def send(form: str, spec: Mapping[str, Any], origin: str) -> None:
    """Leave `spec` (keys of a run spec) for `form`, saying where it came from, and open its page."""
    st.session_state[f"handoff_{form}"] = (dict(spec), origin)
    st.switch_page(PAGES[form])


def receive(form: str) -> tuple[dict[str, Any], str] | None:
    """The spec left for `form` and where it came from, once (None when nothing was left)."""
    return st.session_state.pop(f"handoff_{form}", None)


def shared_news(form: str) -> dict[str, Any]:
    """The shared values `form` has not shown yet: all of them on its first run, then those another page changed
    since. The form takes those it can show before drawing its widgets, then calls `share`."""
    state = st.session_state
    shared = state.get(SHARED, {})
    seen = state.get(f"shared_seen_{form}")
    if seen is None:
        return dict(shared)
    return {name: value for name, value in shared.items() if seen.get(name, MISSING) != value}


def shared_by() -> str:
    """The title of the page whose form last changed the shared configuration ("" before any did)."""
    return TITLES.get(st.session_state.get(SHARED_BY, ""), "")


def share(form: str, values: Mapping[str, Any], taken: Mapping[str, Any]) -> None:
    """After `form` is drawn: publish what its user changed there (`values`, the shared keys it shows now, that
    differ from what it showed in its previous run; those just `taken` from the others are not changes), and
    remember what it has seen. On a form's first run its values only fill the keys nobody set yet."""
    state = st.session_state
    shared = dict(state.get(SHARED, {}))
    last = state.get(f"shared_last_{form}")
    changed = False
    for name, value in values.items():
        if name not in SHARED_KEYS or name in taken:
            continue
        if last is None:
            changed |= name not in shared
            shared.setdefault(name, value)
        elif last.get(name, MISSING) != value and shared.get(name, MISSING) != value:
            shared[name] = value
            changed = True
    if changed:
        state[SHARED_BY] = form
    state[SHARED] = shared
    state[f"shared_seen_{form}"] = dict(shared)
    state[f"shared_last_{form}"] = dict(values)


def sigma_start(calibrated: float) -> float:
    """The σ a form starts from on leaving a target ε for a fixed σ: the σ calibrated for the target, rounded up to
    three decimals (a larger σ, so ε stays within the target) for a field a person reads and edits."""
    return math.ceil(calibrated * 1000) / 1000

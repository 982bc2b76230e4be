"""The Train form's part in the configuration the Plan, Train and Sweep pages share (`handoff.share`): before its
widgets are drawn it takes what another page changed, and once drawn it publishes the keys its spec holds."""

from collections.abc import Mapping
from typing import Any

import streamlit as st

from app import services
from app.common import handoff
from app.common.labels import ALGORITHMS, MODELS
from app.train.presets import FILL_MODE, FORM_DEFAULTS, SIGMA_MODE, TARGET_MODE, TYPED, same_kind
from app.train.session_fields import ORIGIN, field_value, key
from engine.training.config.keys import RANGES

MODES = {TARGET_MODE: "target", SIGMA_MODE: "sigma", FILL_MODE: "fill"}  # the form's mode → `privacy_by`
CHOICES = {"model": MODELS, "algorithm": ALGORITHMS}  # the registries themselves: a new entry is held at once


def take_shared() -> dict[str, Any]:
    """Set the fields another page changed (each that this form can hold) and return them; a typed number is
    taken as it is (the engine judges it, and says so under the field)."""
    state = st.session_state
    taken: dict[str, Any] = {}
    for name, value in handoff.shared_news(handoff.TRAIN).items():
        if (field := held(name, value)) is not None and state.get(key(field[0])) != field[1]:
            state[key(field[0])] = field[1]
            taken[name] = value
    if taken and (by := handoff.shared_by()):
        state[ORIGIN] = (f"The configuration shared by the {by} page.", {n: field_value(n) for n in FORM_DEFAULTS})
    return taken


def held(name: str, value: Any) -> tuple[str, Any] | None:
    """The form field and value that hold a shared value, None when the form cannot hold it."""
    if name == "privacy_by":
        mode = next((mode for mode, by in MODES.items() if by == value), None)
        return None if mode is None else ("mode", mode)
    if name == "dataset":
        return (name, value) if value in services.training_datasets() else None
    if name in CHOICES:
        return (name, value) if value in CHOICES[name] else None
    if name in FORM_DEFAULTS and same_kind(value, FORM_DEFAULTS[name]):
        return name, RANGES[name].convert(value) if name in TYPED or name == "seed" else value
    return None


def share_spec(raw: Mapping[str, Any], taken: Mapping[str, Any]) -> None:
    """Publish the shared keys of the spec the form describes (only those that apply to its algorithm), with how
    privacy is set when it is set by target ε, σ or both."""
    values = {name: raw[name] for name in handoff.SHARED_KEYS if name in raw}
    if "clip_norm" in raw:  # a private gradient method: its privacy is set one of the form's ways
        values["privacy_by"] = MODES[field_value("mode")]
    handoff.share(handoff.TRAIN, values, taken)

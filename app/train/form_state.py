"""The Train form's session state: its keys (the pages share one session state), the values kept while a widget
is hidden, the preset that fills them, and the widgets bound to a form field."""

import json
from collections.abc import Mapping
from typing import Any

import streamlit as st

from app import services
from app.common.safe_text import literal
from app.train.presets import (
    DEFAULT_PRESET,
    FORM_DEFAULTS,
    PRESETS,
    SIGMA_MODE,
    TARGET_MODE,
    TYPED,
    PresetError,
    form_values,
    same_kind,
)
from engine.training.config.keys import RANGES

PREFIX = "train_"  # session-state keys of this form: the pages share one session state
ORIGIN = "train_origin"  # (where a new session's form values came from, those values), when not a preset
LINK = "config"  # the query parameter that holds the form's configuration
MAX_LINK_CHARS = 20_000
KEEP = "session"  # every value survives a page switch (and a widget hidden for a while)


def key(name: str) -> str:
    return PREFIX + name


def field_value(name: str) -> Any:
    return st.session_state[key(name)]


def apply_preset() -> None:
    for name, value in form_values(PRESETS[st.session_state[key("preset")]].spec).items():
        st.session_state[key(name)] = value
    st.session_state.pop(ORIGIN, None)


def restore(spec: Mapping[str, Any] | None, origin: str) -> None:
    """Fill the form from `spec` (a link's or a run's), or say why it keeps the preset."""
    if spec is None:
        return
    try:
        values = form_values(dict(spec))
    except PresetError as exc:
        kept = form_values(PRESETS[DEFAULT_PRESET].spec)
        text = f"The default preset: {literal(origin)} holds what the form cannot show ({literal(exc)})."
        st.session_state[ORIGIN] = (text, kept)
        return
    for name, value in values.items():
        st.session_state[key(name)] = value
    st.session_state[ORIGIN] = (f"The configuration of {literal(origin)}.", values)


def carry(spec: Mapping[str, Any], origin: str) -> None:
    """Set the fields `spec` names (a schedule from the Plan page, say), keeping every other field as it is."""
    state = st.session_state
    for name, value in spec.items():
        if name in FORM_DEFAULTS and same_kind(value, FORM_DEFAULTS[name]):
            state[key(name)] = RANGES[name].convert(value) if name in TYPED else value
    if "target_epsilon" in spec or "noise_multiplier" in spec:
        state[key("mode")] = TARGET_MODE if "target_epsilon" in spec else SIGMA_MODE
    state[ORIGIN] = (f"Carried from {literal(origin)}.", {name: field_value(name) for name in FORM_DEFAULTS})


def initial_spec() -> tuple[Mapping[str, Any] | None, str]:
    """The spec a new session starts from: the link's configuration, else the run the link names."""
    if (text := st.query_params.get(LINK)) is not None:
        return spec_from_link(text), "the link"
    if (run_id := st.query_params.get("run")) and (run := services.get_run(run_id)) is not None:
        return run.spec, f"run {run_id}"
    return None, ""


def spec_from_link(text: str) -> dict[str, Any] | None:
    """The raw spec a `?config=` parameter holds (JSON), or None when it is not one."""
    if len(text) > MAX_LINK_CHARS:
        return None
    try:
        spec = json.loads(text)
    except ValueError:
        return None
    if isinstance(spec, dict) and "dataset" in spec:
        spec["dataset"] = services.dataset_from_link(spec["dataset"])
    return spec if isinstance(spec, dict) else None


def link_spec(raw: Mapping[str, Any]) -> str:
    """The raw spec as the `?config=` parameter (compact JSON; an upload's schema, path and hash stay with the
    upload: the link names it by its label)."""
    linked = {k: services.dataset_link_name(v) if k == "dataset" else v for k, v in raw.items()}
    return json.dumps({k: v for k, v in linked.items() if k not in ("schema", "data_sha256")}, separators=(",", ":"))


def preset_caption() -> str:
    """Under the preset: its source while the form still holds it, else where the form's values came from."""
    current = {name: field_value(name) for name in FORM_DEFAULTS}
    origin, values = st.session_state.get(ORIGIN, ("", None))
    if origin and values == current:
        return origin
    preset = PRESETS[field_value("preset")]
    if form_values(preset.spec) == current:
        return preset.source
    return "Changed from this preset: the fields below hold your own values."


def keep_values() -> None:
    """Streamlit forgets the value of a widget that is not drawn in a run (the hidden-layer width while the
    model is logistic regression, say): writing each value back keeps them all for when they reappear.

    A new session (a reload, a shared link) starts from the configuration the URL names (`?config=`, which
    every run of the page keeps up to date), else from the run on screen (`?run=`), else from the default
    preset; `ORIGIN` says which, for the caption under the preset."""
    state = st.session_state
    if key("preset") not in state:
        state[key("preset")] = DEFAULT_PRESET
        apply_preset()
        restore(*initial_spec())
    for name, default in FORM_DEFAULTS.items():
        state[key(name)] = state.get(key(name), default)
    for name in TYPED:  # a typed field holds the type of its range (a preset may say 20 for 20.0 epochs)
        state[key(name)] = RANGES[name].convert(state[key(name)])


def coerce(name: str, allowed: list) -> None:
    """Keep a choice valid when an earlier choice narrowed its options (no model 'cnn' on Adult)."""
    if field_value(name) not in allowed:
        st.session_state[key(name)] = allowed[-1] if name == "pca_dims" else allowed[0]


def slider(label: str, options: list, name: str, *, help: str, **options_format) -> None:
    """A select slider over `options` for the form field `name`."""
    st.select_slider(label, options, key=key(name), persist_state=KEEP, help=help, **options_format)


def choice(widget, label: str, name: str, options: list, titles: dict[str, str], help: str) -> None:
    """A selectbox or radio over `options` (kept valid by `coerce`), each shown by its title."""
    coerce(name, options)
    widget(label, options, key=key(name), persist_state=KEEP, format_func=titles.get, help=help)


def number(label: str, name: str, *, step: float | int, help: str, format: str | None = None) -> None:
    """A typed number for the form field `name`, any value in the engine's range for it (`RANGES`)."""
    allowed = RANGES[name]
    low = allowed.low if not allowed.low_open else (1 if allowed.integer else min_open_value(name))
    st.number_input(
        label,
        min_value=allowed.convert(low),
        max_value=allowed.convert(allowed.high),
        step=allowed.convert(step),
        format=format,
        key=key(name),
        persist_state=KEEP,
        help=f"{help} Any value in {allowed.describe().removeprefix('a number in ').removeprefix('an integer in ')}.",
    )


def seed(*, help: str) -> None:
    """The form's seed: any integer in [0, 2³¹ − 1]."""
    st.number_input("Seed", 0, 2**31 - 1, key=key("seed"), persist_state=KEEP, help=help)


def min_open_value(name: str) -> float:
    """The smallest value a typed field accepts where the engine's range is open at 0."""
    return {"delta": 1e-12}.get(name, 1e-4)

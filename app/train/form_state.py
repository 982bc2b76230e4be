"""The Train form's session state: its keys (the pages share one session state), the values kept while a widget
is hidden, the preset that fills them, and the widgets bound to a form field."""

from typing import Any

import streamlit as st

from app.train.presets import (
    DEFAULT_PRESET,
    FORM_DEFAULTS,
    PRESETS,
    form_values,
)

PREFIX = "train_"  # session-state keys of this form: the pages share one session state


def key(name: str) -> str:
    return PREFIX + name


def field_value(name: str) -> Any:
    return st.session_state[key(name)]


def apply_preset() -> None:
    for name, value in form_values(PRESETS[st.session_state[key("preset")]].spec).items():
        st.session_state[key(name)] = value


def keep_values() -> None:
    """Streamlit forgets the value of a widget that is not drawn in a run (the hidden-layer width while the
    model is logistic regression, say): writing each value back keeps them all for when they reappear."""
    state = st.session_state
    if key("preset") not in state:
        state[key("preset")] = DEFAULT_PRESET
        apply_preset()
    for name, default in FORM_DEFAULTS.items():
        state[key(name)] = state.get(key(name), default)


def coerce(name: str, allowed: list) -> None:
    """Keep a choice valid when an earlier choice narrowed its options (no model 'cnn' on Adult)."""
    if field_value(name) not in allowed:
        st.session_state[key(name)] = allowed[-1] if name == "pca_dims" else allowed[0]


def slider(label: str, options: list, name: str, *, help: str, **options_format) -> None:
    """A select slider over `options` for the form field `name`."""
    st.select_slider(label, options, key=key(name), help=help, **options_format)


def choice(widget, label: str, name: str, options: list, titles: dict[str, str], help: str) -> None:
    """A selectbox or radio over `options` (kept valid by `coerce`), each shown by its title."""
    coerce(name, options)
    widget(label, options, key=key(name), format_func=titles.get, help=help)

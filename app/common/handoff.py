"""Carrying a configuration from one page to another ("Train this plan", "Sweep around this run"): the sending
page leaves spec keys for the receiving page's form and switches to it; the form takes them on its next run.
Pages never import each other's parts, so this is their one meeting point."""

from collections.abc import Mapping
from typing import Any

import streamlit as st

TRAIN, SWEEP = "train", "sweep"  # the receiving forms
PAGES = {TRAIN: "views/train.py", SWEEP: "views/sweep.py"}


def send(form: str, spec: Mapping[str, Any], origin: str) -> None:
    """Leave `spec` (keys of a run spec) for `form`, saying where it came from, and open its page."""
    st.session_state[f"handoff_{form}"] = (dict(spec), origin)
    st.switch_page(PAGES[form])


def receive(form: str) -> tuple[dict[str, Any], str] | None:
    """The spec left for `form` and where it came from, once (None when nothing was left)."""
    return st.session_state.pop(f"handoff_{form}", None)

"""Before Train: how long the configuration will take on this machine (from the pace of finished runs of the same
shape, else a few of its steps timed now), and on a CPU, when that is more than a few minutes, a plain warning
with a short variant for demos that a button sets in the form (fewer epochs at the same ε: σ recalibrates)."""

import json
import math
from dataclasses import dataclass
from typing import Any

import streamlit as st

from app import services
from app.common.results import duration_text
from app.services.duration import DurationEstimate
from app.train import session_fields
from app.train.widget_spec import learner
from engine.privacy.planning import steps_for

LONG_ON_CPU_S = 180.0  # beyond this on a CPU the page says so and offers the short variant
SHORT_VARIANT_S = 60.0  # what the short variant aims at
MAX_STEPS_SEARCHED = 100_000
VARIANT_NOTE = "train_short_variant_note"  # (what the short variant changed, the epochs it set)
FIRST_WAIT_S = 1.0  # the page waits this long for a timing before it shows "timing…" and draws the rest
TIMING_POLL_S = 1.0  # then a fragment asks again this often


@dataclass(frozen=True, kw_only=True)
class ShortVariant:
    """The form fields a short variant sets, and what it gives."""

    fields: dict[str, Any]
    steps: int
    seconds: float

    def text(self, before: DurationEstimate) -> str:
        changed = f"**{_number(self.fields['epochs'])} epochs** ({self.steps:,} steps)"
        if "target_epsilon" in self.fields:
            changed += f" at the same target **ε = {_number(self.fields['target_epsilon'])}** (σ recalibrates to it)"
        return (
            f"Short variant for a demo: {changed}, about {duration_text(self.seconds)} here instead of "
            f"{duration_text(before.seconds)}. Fewer steps: expect a lower accuracy than the full run. Choose the "
            "preset again to go back."
        )


def expected_duration(raw_spec: dict[str, Any], preview: services.PlanPreview) -> None:
    """The configuration's expected duration under its plan, with the warning and the short variant on a CPU.
    While its steps are timed (in the background) a fragment waits for them and then draws the estimate itself:
    the rest of the page, Train included, is there meanwhile, and no page-wide rerun races what the user types."""
    if preview.error is not None or not preview.steps:
        return
    estimate = services.expected_duration(json.dumps(raw_spec, sort_keys=True), preview.steps, wait_s=FIRST_WAIT_S)
    if estimate == services.TIMING:
        _await_timing(raw_spec, preview)
    else:
        _show(raw_spec, preview, estimate, in_fragment=False)


@st.fragment(run_every=TIMING_POLL_S)
def _await_timing(raw_spec: dict[str, Any], preview: services.PlanPreview) -> None:
    """Say that the steps are being timed, then show the estimate (in this fragment: a whole-page rerun started
    here could overtake a value the user is typing)."""
    estimate = services.expected_duration(json.dumps(raw_spec, sort_keys=True), preview.steps)
    if estimate == services.TIMING:
        st.caption(":material/timer: Expected duration on this machine: timing a few steps of this configuration…")
    else:
        _show(raw_spec, preview, estimate, in_fragment=True)


def _show(raw_spec: dict[str, Any], preview: services.PlanPreview, estimate: Any, *, in_fragment: bool) -> None:
    if not isinstance(estimate, DurationEstimate):
        st.caption("Expected duration: unknown until its dataset's files are here (the pace is timed on them).")
        return
    text = (
        f"**Expected duration on this machine: about {duration_text(estimate.seconds)}** for "
        f"{preview.steps:,} steps, {estimate.source_text()}."
    )
    note, epochs = st.session_state.get(VARIANT_NOTE, (None, None))
    if note and epochs == session_fields.field_value("epochs"):
        st.success(note, icon=":material/timer:")
    if estimate.seconds <= LONG_ON_CPU_S or estimate.pace.device != "cpu":
        st.caption(text)
        return
    variant = short_variant(raw_spec, preview, estimate)
    advice = (
        "; the short variant below finishes in about a minute"
        if variant
        else "; even a few steps take longer than a minute here"
    )
    st.warning(
        f"{text} That is long for a live demo on a CPU (more than {duration_text(LONG_ON_CPU_S)}){advice}.",
        icon=":material/hourglass_top:",
    )
    clicked = variant is not None and st.button(
        f"Use a short variant: about {duration_text(variant.seconds)}",
        key="train_short_variant",
        icon=":material/fast_forward:",
        on_click=_apply,
        args=(variant.fields, variant.text(estimate)),
        help="Sets the form to fewer epochs at the same ε (σ is calibrated again for the fewer steps); every "
        "other field stays as it is.",
    )
    if clicked and in_fragment:  # a click inside the fragment reruns only it: the form must be drawn again too
        st.rerun(scope="app")


def short_variant(
    raw_spec: dict[str, Any], preview: services.PlanPreview, estimate: DurationEstimate
) -> ShortVariant | None:
    """Fewer epochs that finish in about `SHORT_VARIANT_S` at the estimate's pace, at the same ε (the target, or
    the ε the plan reaches with the σ given); None for a textbook learner, or when even one step takes longer."""
    if learner(raw_spec["algorithm"]) or preview.n_train <= 0:
        return None
    pace, lot_size = estimate.pace, raw_spec.get("lot_size", preview.n_train)
    fitting = [t for t in range(1, min(preview.steps, MAX_STEPS_SEARCHED)) if pace.seconds(t) <= SHORT_VARIANT_S]
    if not fitting:
        return None
    epochs = _round_down(max(fitting) * lot_size / preview.n_train)
    steps = steps_for(epochs=epochs, n_train=preview.n_train, lot_size=lot_size)
    fields: dict[str, Any] = {"epochs": epochs}
    if preview.private:  # the same ε: the target, else (σ given) the ε the plan reaches
        fields["target_epsilon"] = raw_spec.get("target_epsilon") or _round_up(preview.epsilon)
    return ShortVariant(fields=fields, steps=steps, seconds=pace.seconds(steps))


def _apply(fields: dict[str, Any], note: str) -> None:
    """Set the short variant's fields in the form (a callback: before the form's widgets are drawn)."""
    session_fields.carry(fields, "the short demo variant")
    st.session_state[VARIANT_NOTE] = (note, session_fields.field_value("epochs"))


def _round_down(value: float) -> float:
    """`value` to two significant digits, rounded down (at least 0.01 epochs)."""
    if value <= 0.01:
        return 0.01
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return round(math.floor(value / scale + 1e-9) * scale, 10)


def _round_up(value: float) -> float:
    """`value` to three significant digits, rounded up (an ε kept: never lower than the plan's)."""
    scale = 10 ** (math.floor(math.log10(value)) - 2)
    return round(math.ceil(value / scale - 1e-9) * scale, 10)


def _number(value: float) -> str:
    return f"{value:g}"

"""The Train form's session state: its keys (the pages share one session state), the values kept while a widget
is hidden, the preset that fills them, and the widgets bound to a form field.

A typed field takes any number: the engine's own validation (`parse_spec`, through the plan preview) judges it,
and when it refuses the spec the reason is shown under the field it names (`field_note`, `show_refusal`), so a
value out of range is never silently replaced by an older one."""

import json
from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

from app import services
from app.common import handoff
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
from app.train.widget_spec import raw_spec
from engine.training.config.keys import RANGES

PREFIX = "train_"  # session-state keys of this form: the pages share one session state
OWN_VALUES = "own values"  # the preset picker's entry once a field differs from the chosen preset
BASE_PRESET = "train_base_preset"  # the preset the form's own values were changed from
FIELD_NOTES = "train_field_notes"  # this run's empty slot under each field: (slot, label) by form field
LAST_MODE = "train_last_mode"  # how privacy was set in the previous run (σ starts from the calibration)
ORIGIN = "train_origin"  # (where a new session's form values came from, those values), when not a preset
LINK = "config"  # the query parameter that holds the form's configuration
MAX_LINK_CHARS = 20_000
KEEP = "session"  # every value survives a page switch (and a widget hidden for a while)


def key(name: str) -> str:
    return PREFIX + name


def field_value(name: str) -> Any:
    return st.session_state[key(name)]


def apply_preset() -> None:
    chosen = st.session_state[key("preset")]
    if chosen == OWN_VALUES:  # picked by hand: the fields stay as they are
        return
    for name, value in form_values(PRESETS[chosen].spec).items():
        st.session_state[key(name)] = value
    st.session_state[BASE_PRESET] = chosen
    st.session_state.pop(ORIGIN, None)


def follow_edits() -> None:
    """Before the preset picker is drawn: once a field differs from the chosen preset the picker says so (its
    own-values entry), so choosing the preset again is a change that restores every field; back at the preset's
    values, it names the preset again."""
    state = st.session_state
    chosen = state[key("preset")]
    base = state.get(BASE_PRESET, DEFAULT_PRESET) if chosen == OWN_VALUES else chosen
    state[BASE_PRESET] = base
    current = {name: field_value(name) for name in FORM_DEFAULTS}
    state[key("preset")] = base if form_values(PRESETS[base].spec) == current else OWN_VALUES


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


def preset_title(name: str) -> str:
    return "Your own values" if name == OWN_VALUES else name


def preset_caption() -> str:
    """Under the preset: its source while the form still holds it, else where the form's values came from."""
    current = {name: field_value(name) for name in FORM_DEFAULTS}
    origin, values = st.session_state.get(ORIGIN, ("", None))
    if origin and values == current:
        return origin
    if (chosen := field_value("preset")) != OWN_VALUES:
        return PRESETS[chosen].source
    base = st.session_state.get(BASE_PRESET, DEFAULT_PRESET)
    return f"Changed from this preset ({base}): the fields below hold your own values; choose it again to restore it."


def keep_values() -> None:
    """Streamlit forgets the value of a widget that is not drawn in a run (the hidden-layer width while the
    model is logistic regression, say): writing each value back keeps them all for when they reappear.

    A new session (a reload, a shared link) starts from the configuration the URL names (`?config=`, which
    every run of the page keeps up to date), else from the run on screen (`?run=`), else from the default
    preset; `ORIGIN` says which, for the caption under the preset."""
    state = st.session_state
    if key("preset") not in state or state[key("preset")] not in (*PRESETS, OWN_VALUES):
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


def choice(
    widget, label: str, name: str, options: list, titles: Mapping[str, str] | Callable[[str], str], help: str
) -> None:
    """A selectbox or radio over `options` (kept valid by `coerce`), each shown by its title (`titles`: a table, or
    a function such as `labels.model_title`); an option without one shows as itself."""
    coerce(name, options)
    title = titles if callable(titles) else lambda option: titles.get(option, str(option))
    widget(label, options, key=key(name), persist_state=KEEP, format_func=title, help=help)


def number(label: str, name: str, *, step: float | int, help: str, format: str | None = None) -> None:
    """A typed number for the form field `name`: the value typed is the value used (no widget bounds, which would
    keep an older value); the engine's range for it (`RANGES`) is in the tooltip, and its reason under the field
    when the value is outside."""
    allowed = RANGES[name]
    st.number_input(
        label,
        step=allowed.convert(step),
        format=format,
        key=key(name),
        persist_state=KEEP,
        help=f"{help} Any value in {allowed.describe().removeprefix('a number in ').removeprefix('an integer in ')}.",
    )
    field_note(name, label)


def seed(*, help: str) -> None:
    """The form's seed: any integer in [0, 2³¹ − 1] (the engine checks it)."""
    st.number_input(
        "Seed", step=1, key=key("seed"), persist_state=KEEP, help=f"{help} Any whole number in [0, 2³¹ − 1]."
    )
    field_note("seed", "Seed")


def start_notes() -> None:
    st.session_state[FIELD_NOTES] = {}


def field_note(name: str, label: str, where: Any = st) -> None:
    """An empty slot under the field `name` (labelled `label`) for the engine's reason when it refuses the field."""
    st.session_state.setdefault(FIELD_NOTES, {})[name] = (where.empty(), label)


NOTED_AS = {"audit": "audit_canaries", "lr_schedule": "lr_schedule", "hidden": "hidden"}  # spec key → form field


def show_refusal(preview: services.PlanPreview) -> None:
    """The engine's reason for refusing the spec, under the field it names (when the form has that field)."""
    if preview.error is None or preview.error_field is None:
        return
    name = preview.error_field.split(".")[0]  # "lr_schedule.end_factor": the schedule's fields
    noted = st.session_state.get(FIELD_NOTES, {}).get(NOTED_AS.get(name, name))
    if noted is None:
        return
    slot, label = noted
    reason = preview.error.split(": ", 1)[1] if ": " in preview.error else preview.error
    slot.error(
        f"**{literal(label)}**: {literal(reason)}. Train is disabled until it is changed.", icon=":material/block:"
    )


def start_from_calibrated_sigma() -> None:
    """On leaving the target-ε mode for a fixed σ: σ starts at the one the plan calibrated for the target ε
    (rounded up to three decimals, so ε stays within the target), not at an unrelated default."""
    state = st.session_state
    if state.get(LAST_MODE) != TARGET_MODE or field_value("mode") == TARGET_MODE:
        return
    chosen = services.training_datasets()[field_value("dataset")]
    values = {name: field_value(name) for name in FORM_DEFAULTS} | {"mode": TARGET_MODE}
    preview = services.preview_plan(json.dumps(raw_spec(values, chosen.info, chosen.schema), sort_keys=True))
    if preview.error is None and preview.noise_multiplier > 0:
        state[key("noise_multiplier")] = handoff.sigma_start(preview.noise_multiplier)

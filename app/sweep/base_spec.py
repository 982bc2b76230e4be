"""The Sweep page's base configuration: a compact form in the sidebar (its own widget keys, so it never
disturbs the Train page's form), each widget with a one-sentence tooltip. Returns the raw base spec;
the engine validates it with every grid point.

The form is part of the configuration the Plan, Train and Sweep pages share (`handoff.share`): it starts from what
the other pages changed (each value its widgets can show: a number within the input's range, a model it offers)
and publishes what changes here."""

import json
from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

from app import services
from app.common import handoff
from app.common.choices import AUGMENTATION_MULTIPLICITIES, EMA_DECAYS
from app.common.labels import SWEEP_MODELS, algorithm_titles, model_titles
from app.common.safe_text import literal
from engine.privacy.auditing import CANARY_KINDS
from engine.training import DATASETS
from engine.training.config.audit import AUDIT_CANARIES
from engine.training.config.keys import Algorithm

PRIVACY_BY = {"target_epsilon": "Target ε", "noise_multiplier": "Noise multiplier σ"}
KEEP = "session"  # every value survives a page switch
REALS = ("epochs", "lr", "clip_norm", "delta", "target_epsilon", "noise_multiplier")  # typed as floats
LAST_BASE = "sweep_base_last"  # the base spec of the previous run (σ mode starts from its calibrated σ)
PENDING = "sweep_base_pending"  # shared values for inputs not drawn since (widget key → value)
PRIVACY_WAYS = {"target": "target_epsilon", "fill": "target_epsilon", "sigma": "noise_multiplier"}  # shared → form


def titled_choice(widget: Callable[..., Any], label: str, titles: Mapping[str, str], **options: Any) -> Any:
    """`widget` (a selectbox, radio or multiselect) over the keys of `titles`, each shown by its title."""
    return widget(label, list(titles), format_func=titles.get, **options)


def base_form() -> dict[str, Any]:
    """The base spec the sidebar describes, started from what the Plan and Train pages changed."""
    taken = take_shared()
    raw = _drawn_base_form()
    shared = {name: raw[name] for name in handoff.SHARED_KEYS if name in raw}
    if "clip_norm" in raw:  # a private gradient method: privacy set by a target ε or by σ
        shared["privacy_by"] = "target" if "target_epsilon" in raw else "sigma"
    handoff.share(handoff.SWEEP, shared, taken)
    st.session_state[LAST_BASE] = raw
    return raw


def start_from_calibrated_sigma() -> None:
    """On switching to σ: σ starts at the one calibrated for the base's target ε (`handoff.sigma_start`)."""
    last = st.session_state.get(LAST_BASE) or {}
    if st.session_state.get("sweep_base_privacy_by") != "noise_multiplier" or "target_epsilon" not in last:
        return
    preview = services.preview_plan(json.dumps(last, sort_keys=True))
    if preview.error is None and preview.noise_multiplier > 0:
        st.session_state["sweep_base_noise_multiplier"] = handoff.sigma_start(preview.noise_multiplier)


def take_shared() -> dict[str, Any]:
    """Take what another page changed: the choices this form offers at once, the numbers when their input is
    drawn (`_pending`, within its range)."""
    state = st.session_state
    news = handoff.shared_news(handoff.SWEEP)
    offered = {"dataset": DATASETS, "model": SWEEP_MODELS, "algorithm": algorithm_titles()}
    pending = state.setdefault(PENDING, {})
    for name, value in news.items():
        if name in offered:
            if value in offered[name]:
                state[f"sweep_base_{name}"] = value
        elif name == "privacy_by":
            if value in PRIVACY_WAYS:
                state["sweep_base_privacy_by"] = PRIVACY_WAYS[value]
        elif isinstance(value, int | float) and not isinstance(value, bool):
            pending[f"sweep_base_{name}"] = float(value) if name in REALS else value
    return news


def _pending(key: str, low: float, high: float, *, whole: bool = False) -> None:
    """Set the input `key` to the value another page gave it, when that is within the input's range."""
    value = st.session_state.get(PENDING, {}).pop(key, None)
    if value is not None and low <= value <= high and (value == int(value) or not whole):
        st.session_state[key] = int(value) if whole else float(value)


def _drawn_base_form() -> dict[str, Any]:
    with st.sidebar:
        st.markdown("**Base configuration of the sweep**")
        if incoming := handoff.receive(handoff.SWEEP):
            origin = take(*incoming)
            st.info(f"Base configuration from {literal(origin)}.", icon=":material/call_received:")
        st.caption("Every grid point starts from these values and changes only the swept parameters.")
        dataset = st.selectbox(
            "Dataset",
            list(DATASETS),
            format_func=lambda d: DATASETS[d].title,
            key="sweep_base_dataset",
            persist_state=KEEP,
            help="The private training data of every run.",
        )
        model = titled_choice(
            st.selectbox,
            "Model",
            model_titles(SWEEP_MODELS),
            key="sweep_base_model",
            persist_state=KEEP,
            help="The model every run trains.",
        )
        algorithm = titled_choice(
            st.selectbox,
            "Algorithm",
            algorithm_titles(),
            key="sweep_base_algorithm",
            persist_state=KEEP,
            help="DP-SGD with sampled lots, full-batch noisy GD, or a non-private baseline.",
        )
        if Algorithm(algorithm).learner:
            return _learner_base(dataset, algorithm)
        raw: dict[str, Any] = {"dataset": dataset, "model": model, "algorithm": algorithm}
        if algorithm != "nonprivate":
            raw |= _privacy()
        if algorithm != "noisy_gd":
            raw["lot_size"] = _whole(
                "Lot size L",
                1,
                1_000_000,
                value=64,
                key="sweep_base_lot_size",
                help="Expected examples per step (a batch size when non-private).",
            )
        raw["epochs"] = _real(
            "Epochs",
            0.1,
            1000.0,
            value=10.0,
            step=1.0,
            key="sweep_base_epochs",
            help="Passes over the data: more steps spend more ε.",
        )
        raw["lr"] = _real(
            "Learning rate",
            0.0001,
            1000.0,
            value=2.0,
            step=0.1,
            format="%g",
            key="sweep_base_lr",
            help="Step size of SGD.",
        )
        raw["seed"] = _whole(
            "First seed",
            0,
            2**31 - 1,
            value=0,
            key="sweep_base_seed",
            help="Seeds count up from this one for every grid point.",
        )
        raw |= _techniques(dataset, algorithm)
        if algorithm == Algorithm.DPSGD and (audit := _audit(raw)):
            raw["audit"] = audit
    return raw


def _techniques(dataset: str, algorithm: str) -> dict[str, Any]:
    """Parameter averaging (every gradient method) and augmentation multiplicity (DP-SGD on images); each key only
    when it is on, so a base without them is the spec it always was."""
    chosen: dict[str, Any] = {}
    decay = st.select_slider(
        "Parameter averaging β",
        EMA_DECAYS,
        key="sweep_base_ema_decay",
        persist_state=KEEP,
        help="The evaluated and released model is the moving average of the iterates, decay β: post-processing, "
        "free in ε (De et al. 2022). 0 = off.",
    )
    if decay > 0:
        chosen["ema_decay"] = float(decay)
    if algorithm == Algorithm.DPSGD and DATASETS[dataset].image_shape is not None:
        multiplicity = st.select_slider(
            "Augmentation multiplicity K",
            AUGMENTATION_MULTIPLICITIES,
            key="sweep_base_augmentation_multiplicity",
            persist_state=KEEP,
            help="Each example's gradient is the mean over K random crops (and flips where the data allow), then "
            "clipped (De et al. 2022, §3.1): the same ε, about K times the cost per step. 1 = off.",
        )
        if multiplicity > 1:
            chosen["augmentation_multiplicity"] = int(multiplicity)
    return chosen


def _audit(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A one-run audit of every run of the sweep (its ε̂ appears on the Compare frontier as an interval). Its count
    starts at min(1,000, the base model's trainable coordinates): gradient canaries take one coordinate each."""
    if not st.checkbox(
        "Audit every run with canaries",
        key="sweep_base_audit",
        persist_state=KEEP,
        help="Each run trains with canaries and reports ε̂, a 95% lower bound on its true ε, beside its ε (Steinke, "
        "Nasr & Jagielski 2023); audited runs never stack and their ε is unchanged.",
    ):
        return None
    low, high = AUDIT_CANARIES
    canaries = _whole(
        "Canaries m",
        low,
        high,
        value=max(low, min(1000, services.model_coordinates(json.dumps(dict(raw), sort_keys=True)) or 1000)),
        key="sweep_base_audit_canaries",
        help="More canaries can show a larger ε̂ (1,000 canaries never show more than about 5 at δ = 1e-5).",
    )
    kind = titled_choice(
        st.radio,
        "Canaries",
        CANARY_KINDS,
        horizontal=True,
        key="sweep_base_audit_kind",
        persist_state=KEEP,
        help="Gradient canaries are read from the released noisy sums (white-box); input canaries by the final "
        "model's loss (black-box).",
    )
    return {"canaries": canaries, "kind": kind}


def _learner_base(dataset: str, algorithm: str) -> dict[str, Any]:
    """A textbook learner's base: its budget and seed; its own fields keep their defaults (sweep target ε, or its
    iterations and learning rate for sq_laplace)."""
    st.caption(
        "A textbook learner (Dwork & Roth ch. 11): no model, lots or clipping; sweep its target ε for a frontier."
    )
    raw: dict[str, Any] = {"dataset": dataset, "algorithm": algorithm}
    raw["target_epsilon"] = _real(
        "Target ε",
        0.01,
        100.0,
        value=1.0,
        step=0.5,
        format="%g",
        key="sweep_base_target_epsilon",
        help="The budget its mechanism spends.",
    )
    raw["delta"] = _real(
        "δ",
        1e-12,
        0.1,
        value=1e-6,
        step=1e-6,
        format="%.1e",
        key="sweep_base_delta",
        help="Keep it well below 1/N; RWM's learning rate depends on it.",
    )
    if algorithm == "sq_laplace":
        raw |= {"epochs": 10, "lr": 2.0}
    raw["seed"] = _whole(
        "First seed",
        0,
        2**31 - 1,
        value=0,
        key="sweep_base_seed",
        help="Seeds count up from this one for every grid point.",
    )
    return raw


def _whole(label: str, low: int, high: int, *, value: int, key: str, help: str) -> int:
    """A whole number from `low` to `high` (a count or a seed), starting at `value`."""
    _pending(key, low, high, whole=True)
    st.session_state.setdefault(key, value)
    return int(st.number_input(label, low, high, key=key, persist_state=KEEP, help=help))


def _real(
    label: str, low: float, high: float, *, value: float, step: float, key: str, help: str, format: str | None = None
) -> float:
    """A real number from `low` to `high` starting at `value`, changed by `step` with the + and - buttons."""
    _pending(key, low, high)
    st.session_state.setdefault(key, value)
    return float(st.number_input(label, low, high, step=step, format=format, key=key, persist_state=KEEP, help=help))


def take(spec: Mapping[str, Any], origin: str) -> str:
    """Fill the base form from a run spec another page sent (its keys the form has); returns `origin`."""
    offered = {"dataset": DATASETS, "model": SWEEP_MODELS, "algorithm": algorithm_titles()}  # choices the form has
    for name in ("dataset", "model", "algorithm", "lot_size", "epochs", "lr", "seed", "clip_norm", "delta"):
        if name in spec and (name not in offered or spec[name] in offered[name]):
            st.session_state[f"sweep_base_{name}"] = float(spec[name]) if name in REALS else spec[name]
    if isinstance(audit := spec.get("audit"), Mapping):
        st.session_state["sweep_base_audit"] = True
        st.session_state["sweep_base_audit_canaries"] = audit.get("canaries", 1000)
        st.session_state["sweep_base_audit_kind"] = audit.get("kind", "gradient")
    for name in PRIVACY_BY:
        if name in spec:
            st.session_state["sweep_base_privacy_by"] = name
            st.session_state[f"sweep_base_{name}"] = float(spec[name])
    return origin


def _privacy() -> dict[str, Any]:
    by = titled_choice(
        st.radio,
        "Set privacy by",
        PRIVACY_BY,
        horizontal=True,
        key="sweep_base_privacy_by",
        persist_state=KEEP,
        on_change=start_from_calibrated_sigma,
        help="Fix the ε to reach (σ is calibrated per run) or fix σ (ε follows, starting from the σ calibrated for "
        "the target); a swept one overrides.",
    )
    if by == "target_epsilon":
        value = _real(
            "Target ε",
            0.01,
            100.0,
            value=3.0,
            step=0.5,
            format="%g",
            key="sweep_base_target_epsilon",
            help="The privacy budget each run ends at.",
        )
    else:
        value = _real(
            "Noise multiplier σ",
            0.05,
            500.0,
            value=1.0,
            step=0.1,
            format="%g",
            key="sweep_base_noise_multiplier",
            help="Noise std divided by the clipping norm C.",
        )
    delta = _real(
        "δ",
        1e-12,
        0.1,
        value=1e-5,
        step=1e-6,
        format="%.1e",
        key="sweep_base_delta",
        help="Probability that the ε guarantee may fail; keep it well below 1/N.",
    )
    clip = _real(
        "Clipping norm C",
        0.001,
        1000.0,
        value=1.0,
        step=0.25,
        format="%g",
        key="sweep_base_clip_norm",
        help="Each example's gradient is scaled to L2 norm ≤ C.",
    )
    return {by: value, "delta": delta, "clip_norm": clip}

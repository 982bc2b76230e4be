"""The Sweep page's base configuration: a compact form in the sidebar (its own widget keys, so it never
disturbs the Train page's form), each widget with a one-sentence tooltip. Returns the raw base spec;
the engine validates it with every grid point."""

from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

from app.common.labels import ALGORITHM_TITLES, MODEL_TITLES
from engine.training import DATASETS
from engine.training.config.keys import Algorithm

MODELS = {key: MODEL_TITLES[key] for key in ("logreg", "mlp")}  # the models a sweep base offers
PRIVACY_BY = {"target_epsilon": "Target ε", "noise_multiplier": "Noise multiplier σ"}
DELTAS = [1e-7, 1e-6, 1e-5, 1e-4]


def titled_choice(widget: Callable[..., Any], label: str, titles: Mapping[str, str], **options: Any) -> Any:
    """`widget` (a selectbox, radio or multiselect) over the keys of `titles`, each shown by its title."""
    return widget(label, list(titles), format_func=titles.get, **options)


def base_form() -> dict[str, Any]:
    with st.sidebar:
        st.markdown("**Base configuration of the sweep**")
        st.caption("Every grid point starts from these values and changes only the swept parameters.")
        dataset = st.selectbox(
            "Dataset",
            list(DATASETS),
            format_func=lambda d: DATASETS[d].title,
            key="sweep_base_dataset",
            help="The private training data of every run.",
        )
        model = titled_choice(st.selectbox, "Model", MODELS, key="sweep_base_model", help="The model every run trains.")
        algorithm = titled_choice(
            st.selectbox,
            "Algorithm",
            ALGORITHM_TITLES,
            key="sweep_base_algorithm",
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
    return raw


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
    raw["delta"] = st.select_slider(
        "δ",
        DELTAS,
        value=1e-6,
        format_func=lambda d: f"{d:.0e}",
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
    """A whole number from `low` to `high` (a count or a seed)."""
    return int(st.number_input(label, low, high, value=value, key=key, help=help))


def _real(
    label: str, low: float, high: float, *, value: float, step: float, key: str, help: str, format: str | None = None
) -> float:
    """A real number from `low` to `high`, changed by `step` with the + and - buttons."""
    return float(st.number_input(label, low, high, value=value, step=step, format=format, key=key, help=help))


def _privacy() -> dict[str, Any]:
    by = titled_choice(
        st.radio,
        "Set privacy by",
        PRIVACY_BY,
        horizontal=True,
        key="sweep_base_privacy_by",
        help="Fix the ε to reach (σ is calibrated per run) or fix σ (ε follows); a swept one overrides.",
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
    delta = st.select_slider(
        "δ",
        DELTAS,
        value=1e-5,
        format_func=lambda d: f"{d:.0e}",
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

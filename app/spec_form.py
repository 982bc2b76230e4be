"""The spec form: presets and one widget per spec field (each with a one-line tooltip), and the
summary of what the configuration implies before anything trains."""

from typing import Any

import streamlit as st

from app import services
from engine.training import DATASETS

# Widget values shared by the presets; each preset names what it changes.
PRESET_BASE: dict[str, Any] = dict(
    dataset="digits", model="logreg", hidden=128, mode="Target ε", target_epsilon=3.0, noise_multiplier=1.0,
    delta=1e-5, clip_norm=1.0, lot_size=64, epochs=20, lr=2.0, seed=0,
)  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "Fast digits demo: logistic regression, ε = 3": PRESET_BASE,
    "Digits MLP (128 ReLU), ε = 3": PRESET_BASE | {"model": "mlp", "lr": 1.0},
    "Seed 000: UCI Adult logistic regression, ε = 1": PRESET_BASE
    | {"dataset": "adult", "target_epsilon": 1.0, "delta": 1e-6, "lot_size": 256, "epochs": 5, "lr": 1.0},
}
# Roughly log-spaced "nice" values from 0.1 to 10 (a log-scale slider, as in OpenDP's DP Wizard).
EPSILONS = [0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
DELTAS = [1e-7, 1e-6, 1e-5, 1e-4]
CLIP_NORMS = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
SIGMAS = [0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0]
LEARNING_RATES = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0]
LOT_SIZES = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def _apply_preset() -> None:
    for key, value in PRESETS[st.session_state["preset"]].items():
        st.session_state[key] = value


def spec_form() -> dict[str, Any]:
    """The sidebar form; returns the raw spec it describes (validated later, by the engine)."""
    if "dataset" not in st.session_state:
        st.session_state["preset"] = next(iter(PRESETS))
        _apply_preset()
    with st.sidebar:
        st.selectbox(
            "Preset",
            list(PRESETS),
            key="preset",
            on_change=_apply_preset,
            help="A configuration known to work; every field below can still be changed.",
        )
        st.markdown("**Data and model**")
        st.selectbox(
            "Dataset",
            list(DATASETS),
            key="dataset",
            format_func=lambda d: DATASETS[d].title,
            help="The private training data. Digits is built in and needs no download.",
        )
        st.selectbox(
            "Model",
            ["logreg", "mlp"],
            key="model",
            format_func={"logreg": "Logistic regression", "mlp": "MLP (one ReLU hidden layer)"}.get,
            help="Bigger models fit better but each gradient carries more noise in total.",
        )
        if st.session_state["model"] == "mlp":
            st.select_slider(
                "Hidden units", [32, 64, 128, 256, 512, 1000], key="hidden", help="Width of the hidden layer."
            )
        st.markdown("**Privacy**")
        st.radio(
            "Set privacy by",
            ["Target ε", "Noise multiplier σ"],
            key="mode",
            horizontal=True,
            help="Either pick the ε you can afford (σ is calibrated to meet it) or pick σ and see the ε.",
        )
        if st.session_state["mode"] == "Target ε":
            st.select_slider(
                "Target ε",
                EPSILONS,
                key="target_epsilon",
                help="Privacy budget: smaller ε means stronger privacy and more noise, "
                "so lower accuracy. Log scale, 0.1 to 10.",
            )
        else:
            st.select_slider(
                "Noise multiplier σ",
                SIGMAS,
                key="noise_multiplier",
                help="Noise std divided by C: larger σ means more privacy (smaller ε) and noisier updates.",
            )
        st.select_slider(
            "δ",
            DELTAS,
            key="delta",
            format_func=lambda d: f"{d:.0e}",
            help="Probability that the ε guarantee may fail; keep it well below 1/N.",
        )
        st.select_slider(
            "Clipping norm C",
            CLIP_NORMS,
            key="clip_norm",
            help="Each example's gradient is scaled down to L2 norm ≤ C: this bounds any one "
            "person's influence. Small C biases gradients; large C needs more noise.",
        )
        st.markdown("**Training**")
        st.select_slider(
            "Lot size L",
            LOT_SIZES,
            key="lot_size",
            help="Expected number of examples per step (each joins with probability L/N). "
            "Larger lots average out noise but spend more privacy per step.",
        )
        st.slider("Epochs", 1, 100, key="epochs", help="Passes over the data: more steps spend more ε.")
        st.select_slider("Learning rate", LEARNING_RATES, key="lr", help="Step size of SGD.")
        st.number_input("Seed", 0, 2**31 - 1, key="seed", help="Fixes sampling, noise and initialization.")
    state = st.session_state
    raw: dict[str, Any] = {
        "dataset": state["dataset"],
        "model": state["model"],
        "algorithm": "dpsgd",
        "delta": state["delta"],
        "clip_norm": state["clip_norm"],
        "lot_size": int(state["lot_size"]),
        "epochs": int(state["epochs"]),
        "lr": state["lr"],
        "seed": int(state["seed"]),
    }
    if state["mode"] == "Target ε":
        raw["target_epsilon"] = state["target_epsilon"]
    else:
        raw["noise_multiplier"] = state["noise_multiplier"]
    if state["model"] == "mlp":
        raw["hidden"] = [int(state["hidden"])]
    return raw


def plan_summary(preview: services.PlanPreview) -> None:
    if preview.error:
        st.error(f"Cannot train this configuration: {preview.error}")
        return
    cols = st.columns(4)
    cols[0].metric(
        "Noise multiplier σ",
        f"{preview.noise_multiplier:.3f}",
        help="Calibrated by the RDP accountant when a target ε is set.",
    )
    cols[1].metric("Steps", f"{preview.steps:,}", help="epochs × N / L")
    cols[2].metric("Sampling rate q", f"{preview.sampling_rate:.4f}", help=f"L / N with N = {preview.n_train:,}")
    cols[3].metric("ε after training (RDP)", f"{preview.epsilon:.3f}", help=f"Best RDP order {preview.best_order:g}.")

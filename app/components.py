"""Reusable page parts: the run panel (status, progress, live charts) and the spec form."""

import time
from typing import Any

import streamlit as st

from app import charts, services
from cache import RunRecord, RunStatus
from engine.training import DATASETS

POLL_SECONDS = 1.0
STATUS_BADGE = {
    RunStatus.QUEUED: (":material/hourglass_top:", "queued: waiting for a worker"),
    RunStatus.RUNNING: (":material/directions_run:", "training"),
    RunStatus.FINISHED: (":material/check_circle:", "finished"),
    RunStatus.FAILED: (":material/error:", "failed"),
    RunStatus.CANCELLED: (":material/cancel:", "cancelled"),
}
PRIVATE_NOTE = (
    "Training loss is computed on the private training data (each step's sampled lot). It is a "
    "diagnostic for you, computed on private data and **not released** under the DP guarantee; "
    "test accuracy uses the held-out test set."
)


def run_panel(run_id: str, *, from_cache: bool = False) -> None:
    run = services.get_run(run_id)
    if run is None:
        st.warning(f"Run {run_id} is not in the store.")
        return
    if from_cache:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.finished_at or run.created_at))
        st.success(
            icon=":material/bolt:",
            body=f"**From the result cache**: this exact configuration already ran (run `{run.id}`, "
            f"finished {when}, engine {run.engine_version}). Nothing was trained again.",
        )
    if run.status.active:
        _live_run(run_id)
    else:
        _run_body(run)


@st.fragment(run_every=POLL_SECONDS)
def _live_run(run_id: str) -> None:
    run = services.get_run(run_id)
    if run is None:
        return
    _run_body(run)
    if not run.status.active:
        st.rerun()  # stop polling: the whole page redraws the finished run once


def _run_body(run: RunRecord) -> None:
    icon, label = STATUS_BADGE[run.status]
    spec = run.spec
    st.subheader(f"{icon} Run `{run.id}` · {label}")
    st.caption(
        f"{spec['dataset']} · {spec['model']} · DP-SGD · C={spec['clip_norm']:g} · lot {spec['lot_size']} · "
        f"{spec['epochs']:g} epochs · lr {spec['lr']:g} · seed {spec['seed']}"
    )
    if run.error:
        st.error(f"Error: {run.error}")
    total = run.total_steps or 0
    frame = services.metrics_frame(run.id)
    _progress(run, frame, total)
    _headline(run, frame)
    target = spec.get("target_epsilon")
    left, middle, right = st.columns(3)
    left.plotly_chart(charts.accuracy_figure(frame, total_steps=total), key=f"acc-{run.id}")
    middle.plotly_chart(charts.loss_figure(frame, total_steps=total), key=f"loss-{run.id}")
    right.plotly_chart(charts.epsilon_figure(frame, total_steps=total, target_epsilon=target), key=f"eps-{run.id}")
    st.caption(PRIVATE_NOTE)


def _progress(run: RunRecord, frame, total: int) -> None:
    if run.status is RunStatus.QUEUED:
        st.progress(0.0, text="Queued: waiting for a worker (`python -m engine worker`).")
        return
    done = run.progress_step
    fraction = min(1.0, done / total) if total else 0.0
    text = f"step {done:,} / {total:,}"
    if run.status is RunStatus.RUNNING and (eta := remaining_seconds(frame, total)) is not None:
        text += f" · about {eta:.0f} s left" if eta >= 1 else " · finishing"
    st.progress(fraction, text=text)
    if run.status is RunStatus.RUNNING and st.button("Cancel run", key=f"cancel-{run.id}"):
        services.cancel_run(run.id)


def remaining_seconds(frame, total: int) -> float | None:
    """Time left at the step rate measured so far (start-up time excluded)."""
    if "elapsed_s" not in frame:
        return None
    timed = frame[["step", "elapsed_s"]].dropna()
    if len(timed) < 2:
        return None
    steps = timed["step"].iloc[-1] - timed["step"].iloc[0]
    seconds = timed["elapsed_s"].iloc[-1] - timed["elapsed_s"].iloc[0]
    return seconds / steps * (total - timed["step"].iloc[-1]) if steps > 0 else None


def _headline(run: RunRecord, frame) -> None:
    result, plan = run.result or {}, run.plan or {}
    last = frame.iloc[-1] if len(frame) else None
    accuracy = result.get("test_accuracy")
    if accuracy is None and last is not None and "test_accuracy" in frame:
        accuracy = frame["test_accuracy"].dropna().iloc[-1] if frame["test_accuracy"].notna().any() else None
    epsilon = result.get("epsilon", float(last["epsilon"]) if last is not None and "epsilon" in frame else None)
    cols = st.columns(4)
    cols[0].metric("Test accuracy", f"{accuracy:.3f}" if accuracy is not None else "–")
    cols[1].metric(
        "ε spent (RDP)",
        f"{epsilon:.3f}" if epsilon is not None else "–",
        help=f"ε at δ={run.spec['delta']:g} from the RDP accountant for the steps taken so far.",
    )
    cols[2].metric("Noise multiplier σ", f"{plan['noise_multiplier']:.3f}" if plan else "–")
    cols[3].metric(
        "Sampling rate q",
        f"{plan['sampling_rate']:.4f}" if plan else "–",
        help="Each example joins each lot independently with probability q = L/N (Poisson sampling).",
    )


# ---------------------------------------------------------------------------------- the spec form

PRESETS: dict[str, dict[str, Any]] = {
    "Fast digits demo: logistic regression, ε = 3": dict(
        dataset="digits",
        model="logreg",
        mode="Target ε",
        target_epsilon=3.0,
        noise_multiplier=1.0,
        delta=1e-5,
        clip_norm=1.0,
        lot_size=64,
        epochs=20,
        lr=2.0,
        seed=0,
        hidden=128,
    ),
    "Digits MLP (128 ReLU), ε = 3": dict(
        dataset="digits",
        model="mlp",
        mode="Target ε",
        target_epsilon=3.0,
        noise_multiplier=1.0,
        delta=1e-5,
        clip_norm=1.0,
        lot_size=64,
        epochs=20,
        lr=1.0,
        seed=0,
        hidden=128,
    ),
    "Seed 000: UCI Adult logistic regression, ε = 1": dict(
        dataset="adult",
        model="logreg",
        mode="Target ε",
        target_epsilon=1.0,
        noise_multiplier=1.0,
        delta=1e-6,
        clip_norm=1.0,
        lot_size=256,
        epochs=5,
        lr=1.0,
        seed=0,
        hidden=128,
    ),
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
        raw["hidden_sizes"] = [int(state["hidden"])]
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

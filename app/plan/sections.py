"""The Plan page's parts: the sidebar form (one widget per input, each with a one-line tooltip) and the panels
that show what the plan implies. Every number comes from `services`; nothing here computes privacy.

The form is part of the configuration the Plan, Train and Sweep pages share (`handoff.share`): it starts from
what the other pages changed (the values its widgets can show) and publishes what changes here."""

import math
from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import services
from app.common import charts, handoff
from app.common.choices import EPSILONS
from engine.privacy import Panel, epsilon_text
from engine.privacy.limits import TARGET_EPSILON

CUSTOM = "custom"
LOT_SIZE, SAMPLING_RATE = "Lot size L", "Sampling rate q"
TARGET, SIGMA = "Target ε", "Noise multiplier σ"
KEEP = "session"  # widget values survive page switches and hidden inputs (the L/q and ε/σ choices)
MOST_EPOCHS = 100  # the epochs slider's end, unless the shared configuration holds more
SIGMA_RANGE = (0.3, 500.0)  # the σ input's range
CALIBRATED = "plan_calibrated_sigma"  # σ calibrated for the target ε in the last run (σ mode starts from it)
PRIVACY_BY = {TARGET: "target", SIGMA: "sigma"}  # the shared configuration's names of the ways
DEFAULTS: dict[str, Any] = {
    "plan_lot_size": 64,
    "plan_q": 0.01,
    "plan_epochs": 20,
    "plan_delta": 1e-5,
    "plan_target_epsilon": 3.0,
    "plan_sigma": 1.0,
    "plan_n": 10_000,
}
# The tooltips of the inputs shown for one way of giving lots or privacy (each input is labelled by its way).
WAY_HELP = {
    LOT_SIZE: "Expected examples per step (each joins with probability L/N): larger lots average out the noise but "
    "spend more privacy per step.",
    SAMPLING_RATE: "Each example's probability of joining each lot: a small q amplifies privacy, but an epoch then "
    "takes 1/q steps.",
    TARGET: "Privacy budget: smaller ε means stronger privacy but more noise, so lower accuracy. Log scale, 0.1 to 10.",
    SIGMA: "Noise std divided by the clipping norm C: larger σ means more privacy (smaller ε) and noisier updates.",
}


def take_shared(sizes: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """Set the inputs another page changed, where an input can show the value; returns those taken."""
    state = st.session_state
    for name, value in DEFAULTS.items():
        state.setdefault(name, value)
    taken: dict[str, Any] = {}
    for name, value in handoff.shared_news(handoff.PLAN).items():
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if name == "dataset" and value in sizes:
            state["plan_dataset"] = value
        elif name == "lot_size" and number and value >= 1 and value == int(value):
            state["plan_lot_size"], state["plan_lots"] = int(value), LOT_SIZE
        elif name == "epochs" and number and value == int(value) and 1 <= value <= 1000:
            state["plan_epochs"] = int(value)
        elif name == "delta" and number:
            state["plan_delta"] = float(value)
        elif name == "privacy_by" and value in ("target", "fill", "sigma"):
            state["plan_mode"] = SIGMA if value == "sigma" else TARGET
        elif name == "target_epsilon" and number and TARGET_EPSILON.problem(value) is None:
            state["plan_target_epsilon"] = float(value)
        elif name == "noise_multiplier" and number and SIGMA_RANGE[0] <= value <= SIGMA_RANGE[1]:
            state["plan_sigma"] = float(value)
        else:
            continue
        taken[name] = value
    return taken


def share(settings: services.PlanSettings, dataset: str, taken: dict[str, Any]) -> None:
    """Publish the inputs that describe a configuration the other pages can take."""
    values: dict[str, Any] = {"epochs": settings.epochs, "delta": settings.delta}
    if dataset != CUSTOM:
        values["dataset"] = dataset
    if settings.lot_size is not None:
        values["lot_size"] = settings.lot_size
    if settings.target_epsilon is not None:
        values |= {"privacy_by": "target", "target_epsilon": settings.target_epsilon}
    else:
        values |= {"privacy_by": "sigma", "noise_multiplier": settings.noise_multiplier}
    handoff.share(handoff.PLAN, values, taken)


def start_from_calibrated_sigma() -> None:
    """On switching to σ: σ starts at the one calibrated for the target ε (rounded up to three decimals, so ε
    stays within the target), not at an unrelated default."""
    state = st.session_state
    sigma = state.get(CALIBRATED)
    if state.get("plan_mode") == SIGMA and sigma is not None:
        state["plan_sigma"] = min(max(handoff.sigma_start(sigma), SIGMA_RANGE[0]), SIGMA_RANGE[1])


def plan_form() -> services.PlanSettings:
    """The sidebar inputs, as the settings they describe (validated by `services.privacy_plan`)."""
    sizes = services.builtin_dataset_sizes()
    taken = take_shared(sizes)
    with st.sidebar:
        st.markdown("**Data**")
        dataset = st.selectbox(
            "Dataset",
            [*sizes, CUSTOM],
            key="plan_dataset",
            persist_state=KEEP,
            format_func=lambda d: "Custom size N…" if d == CUSTOM else sizes[d][0],
            help="Only the number of training examples N matters for privacy accounting; pick a built-in "
            "dataset or give N yourself.",
        )
        if dataset == CUSTOM:
            n = _at_least_one(
                "Dataset size N",
                step=1_000,
                key="plan_n",
                help="Training examples: with the same lot size, a larger N means a smaller sampling rate q = L/N, "
                "so less ε per step.",
            )
        else:
            n = sizes[dataset][1]
            st.caption(f"N = {n:,} training examples.")
        st.markdown("**Lots and steps**")
        lot_size, rate = _one_of(
            "Lots given by",
            {LOT_SIZE: _lot_size, SAMPLING_RATE: _sampling_rate},
            key="plan_lots",
            help="Give the expected lot size L (then q = L/N) or the sampling rate q itself.",
        )
        epochs = st.slider(
            "Epochs",
            1,
            max(MOST_EPOCHS, st.session_state["plan_epochs"]),
            key="plan_epochs",
            persist_state=KEEP,
            help="Passes over the data (T = ⌈epochs·N/L⌉ steps): more epochs usually fit better and spend more ε.",
        )
        st.markdown("**Privacy**")
        delta = st.number_input(
            "δ",
            step=1e-6,
            format="%.1e",
            key="plan_delta",
            persist_state=KEEP,
            help="Probability that the ε guarantee may fail outright: keep it well below 1/N.",
        )
        st.caption(f"1/N = {1 / n:.1e}; a common choice is δ ≤ 1/(10N) = {1 / (10 * n):.1e}.")
        target, sigma = _one_of(
            "Set privacy by",
            {TARGET: _target_epsilon, SIGMA: _noise_multiplier},
            key="plan_mode",
            on_change=start_from_calibrated_sigma,
            help="Pick the ε you can afford (σ is calibrated to meet it), or pick σ and see the ε it gives; σ starts "
            "from the one calibrated for the target.",
        )
        st.caption(
            "The clipping norm C does not change ε: noise of std σ·C masks any one example's clipped gradient "
            "(norm ≤ C). C trades clipping bias against noise; set it on the Train page."
        )
    settings = services.PlanSettings(
        dataset_size=int(n),
        epochs=int(epochs),
        delta=float(delta),
        lot_size=lot_size,
        sampling_rate=rate,
        target_epsilon=target,
        noise_multiplier=sigma,
    )
    share(settings, dataset, taken)
    return settings


def _one_of(
    label: str, inputs: dict[str, Callable[[], float]], *, key: str, help: str, on_change: Callable | None = None
) -> tuple[float | None, ...]:
    """A horizontal choice between ways of giving an input: the chosen way's widget value, None for the others."""
    chosen = st.radio(label, list(inputs), key=key, persist_state=KEEP, horizontal=True, on_change=on_change, help=help)
    return tuple(widget() if way == chosen else None for way, widget in inputs.items())


def _at_least_one(label: str, *, step: int, key: str, help: str) -> int:
    """A whole number of at least 1 (a count of examples), starting at its default (`DEFAULTS`)."""
    return st.number_input(label, min_value=1, step=step, key=key, persist_state=KEEP, help=help)


def _lot_size() -> int:
    return _at_least_one(LOT_SIZE, step=16, key="plan_lot_size", help=WAY_HELP[LOT_SIZE])


def _sampling_rate() -> float:
    return st.number_input(
        SAMPLING_RATE,
        step=0.005,
        format="%.4f",
        key="plan_q",
        persist_state=KEEP,
        help=WAY_HELP[SAMPLING_RATE],
    )


def _target_epsilon() -> float:
    """The slider's stops, and the target another page set between them (0.8 typed on the Train page)."""
    stops = sorted({*EPSILONS, st.session_state["plan_target_epsilon"]})
    return st.select_slider(TARGET, stops, key="plan_target_epsilon", persist_state=KEEP, help=WAY_HELP[TARGET])


def _noise_multiplier() -> float:
    return st.number_input(
        SIGMA,
        min_value=SIGMA_RANGE[0],
        max_value=SIGMA_RANGE[1],
        step=0.1,
        key="plan_sigma",
        persist_state=KEEP,
        help=WAY_HELP[SIGMA],
    )


def headline(plan: services.PrivacyPlan) -> DeltaGenerator:
    """σ, T, q and ε by RDP (all instant); returns the slot for the tightest ε, which needs the slow accountants."""
    settings = plan.settings
    st.session_state[CALIBRATED] = plan.noise_multiplier if plan.calibrated else None
    cols = st.columns(5)
    if plan.calibrated:
        cols[0].metric(
            "Noise multiplier σ",
            f"{plan.noise_multiplier:.3f}",
            delta=f"calibrated by RDP for ε ≤ {settings.target_epsilon:g}",
            delta_color="off",
            delta_arrow="off",
            help="The smallest σ whose ε by the RDP accountant meets the target; the Train page calibrates the same "
            "way unless you choose PLD there. The toggle below finds PLD's σ.",
        )
    else:
        cols[0].metric("Noise multiplier σ", f"{plan.noise_multiplier:.3f}", help="As given.")
    cols[1].metric("Steps T", f"{plan.steps:,}", help="⌈epochs × N / L⌉ DP-SGD steps, each on one Poisson-sampled lot.")
    cols[2].metric(
        "Sampling rate q",
        f"{plan.sampling_rate:.4g}",
        help=f"Each example joins each lot with probability q = L/N (expected lot size {plan.expected_lot_size:,.4g} "
        f"of N = {settings.dataset_size:,}).",
    )
    cols[3].metric(
        "ε by RDP",
        epsilon_text(plan.rdp_epsilon, ".3f"),
        help=f"After all T steps at δ = {settings.delta:.3g} (best RDP order α = {plan.best_order:g}). Runs track "
        "their live ε with RDP.",
    )
    return cols[4].empty()


def tightest_epsilon(slot: DeltaGenerator, name: str, epsilon: float) -> None:
    slot.metric(
        "ε, tightest bound",
        epsilon_text(epsilon, ".3f"),
        delta=f"by {charts.accountant_label(name)}",
        delta_color="off",
        delta_arrow="off",
        help="The smallest of the accountants' ε below. Each is a valid upper bound for this run, so the smallest "
        "is too; a finished run reports it.",
    )


def warnings(box: DeltaGenerator, messages: list[str]) -> None:
    for message in messages:
        box.warning(message, icon=":material/warning:")


def pld_sigma(plan: services.PrivacyPlan, sigma: float | str) -> None:
    if isinstance(sigma, str):
        st.info(f"No σ by PLD: {sigma}", icon=":material/info:")
        return
    saving = 1 - sigma / plan.noise_multiplier
    st.info(
        f"By the tighter PLD accountant σ = **{sigma:.3f}** meets ε ≤ {plan.settings.target_epsilon:g}: "
        f"{saving:.0%} less noise than the RDP-calibrated σ = {plan.noise_multiplier:.3f}. On the Train page, "
        "“Calibrate σ by: PLD” trains with it.",
        icon=":material/info:",
    )


def accountant_curves(plan: services.PrivacyPlan, accounts: Panel) -> None:
    """ε against epochs by every accountant, and the table of their final values."""
    left, right = st.columns([6, 5], gap="large")
    with left:
        log_y = st.toggle(
            "Log-scale ε axis",
            value=True,
            key="plan_log_y",
            persist_state=KEEP,
            help="The composition theorems are often orders of magnitude looser than RDP and PLD; a log axis "
            "keeps every line in view.",
        )
        figure = charts.plan_epsilon_figure(
            services.plan_epsilon_frame(plan, accounts),
            target_epsilon=plan.settings.target_epsilon,
            tightest=accounts.tightest()[0],
            log_y=log_y,
        )
        st.plotly_chart(figure, key="plan_epsilon_chart")
        st.caption(
            "PLD is computed at the marked points (up to a second each); the other accountants at up to "
            f"{services.PLOT_POINTS} step counts. Each line is a valid upper bound on ε after that many epochs."
        )
    with right:
        st.markdown(f"**ε after {plan.steps:,} steps, at δ = {plan.settings.delta:.3g}**")
        st.dataframe(
            services.plan_accountant_table(accounts),
            hide_index=True,
            width="stretch",
            column_config={"ε": st.column_config.NumberColumn(format="%.4g")},
        )
        for line in services.plan_not_applicable(accounts):
            st.caption(f"Not applicable: {line}.")


def privacy_statement(lines: tuple[str, ...]) -> None:
    st.subheader("Privacy statement")
    st.caption("What a run with these settings would report when it finishes.")
    st.markdown("\n".join(f"- {line}" for line in lines))


def train_this_plan(settings: services.PlanSettings) -> None:
    """A button that opens the Train page with this schedule (dataset, lots, epochs, δ, and ε or σ) in its form."""
    dataset = st.session_state.get("plan_dataset")
    if not st.button(
        "Train this plan",
        key="plan_train",
        icon=":material/model_training:",
        disabled=dataset == CUSTOM,
        help="Open the Train page with this dataset, lot size, epochs, δ and ε (or σ) in its form; the model, C "
        "and learning rate stay as they are there."
        + (" Pick a built-in dataset first: a custom N has no data to train on." if dataset == CUSTOM else ""),
    ):
        return
    n = settings.dataset_size
    spec = {"dataset": dataset, "algorithm": "dpsgd", "epochs": settings.epochs, "delta": settings.delta}
    spec["lot_size"] = settings.lot_size or max(1, round((settings.sampling_rate or 0.0) * n))
    if settings.target_epsilon is not None:
        spec["target_epsilon"] = settings.target_epsilon
    else:
        spec["noise_multiplier"] = settings.noise_multiplier
    handoff.send(handoff.TRAIN, spec, "the Plan page")

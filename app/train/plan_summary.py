"""What the Train page's configuration implies before anything trains: a note when the dataset's files are
missing, then σ, steps, q and ε with ε's planned course over the run."""

import streamlit as st

from app import services
from app.common import charts
from app.common.safe_text import code, literal
from engine.training import DATASETS

LEARNER_PARAMETERS = {  # a textbook learner's mechanism parameter, shown where DP-SGD shows σ
    "expmech_epsilon": (
        "ε of the exponential mechanism",
        "The whole budget goes to one draw ∝ exp(ε·score) (a monotone score: ε-DP without the factor ½).",
    ),
    "query_epsilon": (
        "ε per statistical query",
        "ε/(T·d): T iterations of d queries, by pure composition; the Laplace scale is its inverse.",
    ),
    "eta": ("Learning rate η", "η = ε/√(32 T ln(1/δ)) (Dwork & Roth Thm 11.2): each round is 2η-DP."),
}


def dataset_note(dataset: str) -> None:
    """Say so when the chosen dataset's files are not on this machine (the plan still works: it needs only N)."""
    missing = services.missing_dataset_files(dataset) if dataset in DATASETS else []
    if not missing:
        return
    folders = ", ".join(code(d) for d in services.data_directories())
    st.warning(
        icon=":material/download:",
        body=f"**{DATASETS[dataset].title} is not downloaded**: {len(missing)} file(s) missing "
        f"({code(missing[0])}…) in {folders}. The plan below needs only public facts; to train, a worker downloads "
        "the files on first use, which needs internet access. Offline, copy them into one of these folders "
        "(or point `DPLAB_DATA_DIR` at a copy), or pick the built-in Digits.",
    )


def plan_summary(preview: services.PlanPreview, *, target_epsilon: float | None = None) -> None:
    """What the configuration implies before launch: σ, steps, q and ε, with ε's planned course over the run."""
    if preview.error:
        st.error(f"Cannot train this configuration: {literal(preview.error)}")
        return
    if not preview.private:
        cols = st.columns(4)
        cols[0].metric("Steps", f"{preview.steps:,}", help="epochs × N / batch size")
        cols[1].metric("Batch fraction", f"{preview.sampling_rate:.4f}", help=f"B / N with N = {preview.n_train:,}")
        cols[2].metric("ε", "∞", help="Not private: no clipping, no noise, so no finite ε bounds what it reveals.")
        return
    numbers, course = st.columns([1, 1], gap="medium")
    top, bottom = numbers.columns(2), numbers.columns(2)
    if preview.learner_parameters:
        name, value = preview.learner_parameters[0]
        label, text = LEARNER_PARAMETERS[name]
        top[0].metric(label, f"{value:.4g}", help=text)
    else:
        by = preview.calibrated_by
        top[0].metric(
            "Noise multiplier σ",
            f"{preview.noise_multiplier:.3f}",
            delta=f"by {by.upper()}" if by else None,
            delta_color="off",
            delta_arrow="off",
            help="Noise std over C; "
            + (f"the smallest σ whose ε by the {by.upper()} accountant meets the target." if by else "as you set it."),
        )
    top[1].metric("Steps", f"{preview.steps:,}", help="epochs × N / L (noisy GD: one full-batch step per epoch)")
    bottom[0].metric("Sampling rate q", f"{preview.sampling_rate:.4f}", help=f"L / N with N = {preview.n_train:,}")
    if preview.pld_epsilon is not None:
        chose = "chose the steps" if preview.filled else "calibrated σ"
        bottom[1].metric(
            "ε after training (PLD)",
            f"{preview.pld_epsilon:.3f}",
            help=f"An upper bound by the PLD accountant, which {chose} (RDP gives {preview.epsilon:.3f}; the "
            "curve beside is RDP's); the finished run reports the tightest of all accountants, never more.",
        )
    else:
        bottom[1].metric(
            "ε after training (RDP)",
            f"{preview.epsilon:.3f}",
            help=f"An upper bound by the RDP accountant (best order {preview.best_order:g}), up-front releases "
            "included; the finished run reports the tightest of all accountants, never more.",
        )
    if preview.filled:
        numbers.caption(
            f"{preview.filled[0].upper()}{preview.filled[1:]}, the most steps whose ε stays within the target by "
            "that accountant. The live curve is RDP's and may end above the target; the finished run reports the "
            "tightest accountant's ε."
        )
    pld = (preview.pld_curve_steps, preview.pld_curve_epsilons) if preview.pld_curve_steps else None
    figure = charts.planned_epsilon_figure(
        preview.curve_steps, preview.curve_epsilons, target_epsilon=target_epsilon, pld=pld
    )
    course.plotly_chart(figure, key="train_planned_epsilon", config={"displayModeBar": False})

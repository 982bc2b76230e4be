"""The spec form: a preset, the algorithm, then one widget per spec field that applies to it (each with a
one-sentence tooltip on what it does to privacy and accuracy), and the summary of what the configuration
implies before anything trains. Widgets only describe a spec: nothing here starts training."""

import json
from typing import Any

import streamlit as st

from app import services
from app.common import handoff
from app.common.labels import ALGORITHMS, algorithm_title, model_title
from app.train import widget_spec
from app.train.more_fields import advanced, learner_fields
from app.train.presets import (
    COUNT_EPSILONS,
    FILL_MODE,
    FORM_DEFAULTS,
    HIDDEN_WIDTHS,
    LR_SCHEDULES,
    PCA_NOISES,
    PRESETS,
    SIGMA_MODE,
    TARGET_MODE,
)
from app.train.session_fields import (
    KEEP,
    LAST_MODE,
    OWN_VALUES,
    apply_preset,
    carry,
    choice,
    coerce,
    field_note,
    field_value,
    follow_edits,
    keep_values,
    key,
    number,
    preset_caption,
    preset_title,
    seed,
    show_refusal,
    slider,
    start_from_calibrated_sigma,
    start_notes,
)
from app.train.shared_fields import share_spec, take_shared
from app.train.technique_fields import accuracy_techniques, features_picker, wrn_fields
from engine.training import DATASETS

__all__ = ["spec_form"]
CALIBRATION_TITLES = {"rdp": "RDP (instant)", "pld": "PLD (tightest)"}


def _dataset_label(name: str) -> str:
    if name not in DATASETS:  # a CSV upload
        return f"{services.training_datasets()[name].label} (your upload)"
    title = DATASETS[name].title
    return f"{title} — not downloaded" if services.missing_dataset_files(name) else title


def _chosen_dataset() -> services.TrainingDataset:
    return services.training_datasets()[field_value("dataset")]


def spec_form() -> dict[str, Any]:
    """The sidebar form; returns the raw spec it describes, after the engine's validation of it (the plan
    preview) has put its reason for refusing it, if any, under the field it names."""
    keep_values()
    if incoming := handoff.receive(handoff.TRAIN):  # "Train this plan" on the Plan page
        carry(*incoming)
    taken = take_shared()  # what the Plan or Sweep page changed since this form was drawn
    start_notes()
    with st.sidebar:
        preset_picker()
        algorithm_picker()
        if widget_spec.learner(field_value("algorithm")):
            dataset_picker()
            learner_fields()
        else:
            data_and_model()
            if widget_spec.private(field_value("algorithm")):
                privacy()
            else:
                st.caption("No clipping and no noise: ε = ∞. Its accuracy is the reference the private runs pay for.")
            training()
            advanced()
    chosen = _chosen_dataset()
    raw = widget_spec.raw_spec({name: field_value(name) for name in FORM_DEFAULTS}, chosen.info, chosen.schema)
    show_refusal(services.preview_plan(json.dumps(raw, sort_keys=True)))  # cached: the page shows the same preview
    share_spec(raw, taken)
    return raw


def preset_picker() -> None:
    follow_edits()
    st.selectbox(
        "Preset",
        [*PRESETS, OWN_VALUES],
        key=key("preset"),
        persist_state=KEEP,
        on_change=apply_preset,
        format_func=preset_title,
        help="Fills every field below with a configuration known to work; each field can still be changed, and "
        "choosing the preset again restores it.",
    )
    st.caption(preset_caption())


def algorithm_picker() -> None:
    coerce("algorithm", list(ALGORITHMS))
    st.selectbox(
        "Algorithm",
        list(ALGORITHMS),
        key=key("algorithm"),
        persist_state=KEEP,
        format_func=algorithm_title,
        help="DP-SGD and noisy GD are private (clipping plus noise); the non-private baseline shows the "
        "accuracy that privacy costs.",
    )


def dataset_picker() -> None:
    algorithm = field_value("algorithm")
    available = services.training_datasets()
    datasets = widget_spec.datasets_for(algorithm, {name: found.info for name, found in available.items()})
    coerce("dataset", datasets)
    here = [d for d in datasets if not services.missing_dataset_files(d)]
    options = here + [d for d in datasets if d not in here]  # what can train offline first
    coerce("dataset", options)
    st.selectbox(
        "Dataset",
        options,
        key=key("dataset"),
        persist_state=KEEP,
        format_func=_dataset_label,
        help="The private training data: a larger N gives more accuracy for the same ε. Digits is built in; "
        "CSV files saved on the Data page are listed too.",
    )


def data_and_model() -> None:
    algorithm = field_value("algorithm")
    st.markdown("**Data and model**")
    dataset_picker()
    info = _chosen_dataset().info
    features_picker(info)
    models = widget_spec.models_for(info, algorithm, field_value("features"))
    choice(
        st.selectbox,
        "Model",
        "model",
        models,
        model_title,
        "Bigger models can fit better, but the same noise is spread over more parameters.",
    )
    if field_value("model") == "mlp":
        slider(
            "Hidden units",
            HIDDEN_WIDTHS,
            "hidden",
            help="Width of the hidden layer: more capacity, and a noisier gradient per parameter.",
        )
    if field_value("model") == "wrn":
        wrn_fields()
    dims = widget_spec.pca_dims_for(info)
    if not widget_spec.takes_projections(field_value("model")) or field_value("features") != "pixels" or not dims:
        return
    st.checkbox(
        "Project inputs with PCA" + (" (DP-PCA)" if widget_spec.private(algorithm) else ""),
        key=key("use_pca"),
        persist_state=KEEP,
        help="Fewer input dimensions make each gradient less noisy; privately fitted, it spends some ε up front.",
    )
    if field_value("use_pca"):
        coerce("pca_dims", dims)
        st.select_slider(
            "PCA dimensions",
            dims,
            key=key("pca_dims"),
            persist_state=KEEP,
            help="Dimensions kept: fewer denoise more but lose detail.",
        )
        if widget_spec.private(algorithm):
            slider(
                "DP-PCA noise σ_p",
                PCA_NOISES,
                "pca_noise",
                help="Noise on the covariance: larger σ_p spends less ε on PCA and gives a blurrier projection.",
            )


def privacy() -> None:
    algorithm = field_value("algorithm")
    st.markdown("**Privacy**")
    modes = [TARGET_MODE, SIGMA_MODE] + ([FILL_MODE] if algorithm == "dpsgd" else [])
    coerce("mode", modes)
    st.radio(
        "Set privacy by",
        modes,
        key=key("mode"),
        persist_state=KEEP,
        horizontal=True,
        on_change=start_from_calibrated_sigma,
        help="Pick the ε you can afford (σ is calibrated to meet it), or pick σ and see the ε it gives, or fill a "
        "budget: σ fixed and as many epochs as the target ε allows by the tightest accountant (the Epochs field is "
        "then the most it may train). Leaving the target ε, σ starts from the one calibrated for it.",
    )
    st.session_state[LAST_MODE] = field_value("mode")
    if field_value("mode") == FILL_MODE:
        number(
            "Target ε",
            "target_epsilon",
            step=0.1,
            format="%g",
            help="The budget the run spends: it trains until the tightest accountant (PLD or RDP) reaches it.",
        )
        number(
            "Noise multiplier σ",
            "noise_multiplier",
            step=0.1,
            format="%g",
            help="Fixed noise: a larger σ buys more steps within the same ε (Abadi et al. 2016 fill their budget so).",
        )
    elif field_value("mode") == TARGET_MODE:
        number(
            "Target ε",
            "target_epsilon",
            step=0.1,
            format="%g",
            help="Privacy budget: a smaller ε is stronger privacy and needs more noise, so less accuracy.",
        )
        choice(
            st.radio,
            "Calibrate σ by",
            "calibration_accountant",
            ["rdp", "pld"],
            CALIBRATION_TITLES,
            help="RDP finds σ instantly but over-estimates ε, so the run spends less than the target (more "
            "noise than needed). PLD, the tightest accountant, finds the σ that spends the target: less "
            "noise, better accuracy; it takes a few seconds.",
        )
    else:
        number(
            "Noise multiplier σ",
            "noise_multiplier",
            step=0.1,
            format="%g",
            help="Noise std divided by C: a larger σ gives more privacy (smaller ε) and noisier updates.",
        )
    number(
        "δ",
        "delta",
        step=1e-6,
        format="%.1e",
        help="Probability that the ε guarantee may fail: keep it well below 1/N; a smaller δ costs a little ε.",
    )
    choice(st.radio, "Noise", "noise", list(widget_spec.NOISE_TITLES), widget_spec.NOISE_TITLES, widget_spec.NOISE_HELP)
    number(
        "Clipping bound b" if algorithm == "noisy_gd" else "Clipping norm C",
        "clip_norm",
        step=0.1,
        format="%g",
        help="Each example's gradient is scaled to L2 norm ≤ C, bounding one person's influence: a small C "
        "biases the gradient, a large C needs more noise.",
    )
    if algorithm == "noisy_gd":
        slider(
            "ε of the noisy count",
            COUNT_EPSILONS,
            "count_epsilon",
            help="Noisy GD divides by a Laplace-noised N, charged up front: a larger share of ε makes it more exact.",
        )


def training() -> None:
    st.markdown("**Training**")
    if field_value("algorithm") != "noisy_gd":
        number(
            "Lot size L" if field_value("algorithm") in ("dpsgd", "aniso_dpsgd") else "Batch size",
            "lot_size",
            step=16,
            help="Expected examples per step (each joins with probability L/N): larger lots average out the "
            "noise but spend more privacy per step.",
        )
    number(
        "Epochs",
        "epochs",
        step=1.0,
        format="%g",
        help="Passes over the data: more steps can fit better, and every step spends ε.",
    )
    number(
        "Learning rate",
        "lr",
        step=0.1,
        format="%g",
        help="SGD step size: post-processing, so it changes accuracy but never ε.",
    )
    st.selectbox(
        "Learning-rate schedule",
        LR_SCHEDULES,
        key=key("lr_schedule"),
        persist_state=KEEP,
        format_func={"constant": "Constant", "linear": "Linear decay"}.get,
        help="Decaying the step size lets noisy SGD settle; it costs no privacy.",
    )
    if field_value("lr_schedule") == "linear":
        left, right = st.columns(2)
        left.number_input(
            "to × lr",
            step=0.01,
            key=key("lr_end_factor"),
            persist_state=KEEP,
            help="The final learning rate as a fraction of the first (Abadi et al.'s MNIST setting: 0.52). Any "
            "value in (0, 10].",
        )
        right.number_input(
            "over epochs",
            step=1.0,
            key=key("lr_decay_epochs"),
            persist_state=KEEP,
            help="Epochs over which the rate decays linearly, then stays. Any value in (0, 1000].",
        )
        field_note("lr_schedule", "Learning-rate schedule")
    accuracy_techniques(_chosen_dataset().info)
    seed(help="Fixes the initialization; in the reproducible noise mode the whole spec fixes the lots and noise.")

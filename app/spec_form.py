"""The spec form: a preset, the algorithm, then one widget per spec field that applies to it (each with a
one-sentence tooltip on what it does to privacy and accuracy), and the summary of what the configuration
implies before anything trains. Widgets only describe a spec: nothing here starts training."""

from typing import Any

import streamlit as st

from app import charts, services, train_spec
from app.safe_text import code, literal
from app.train_presets import (
    ANISO_MAX_RATIOS,
    ANISO_SMOOTHINGS,
    CLIP_NORMS,
    COUNT_EPSILONS,
    DEFAULT_PRESET,
    DELTAS,
    EPOCHS,
    EPSILONS,
    FORM_DEFAULTS,
    HIDDEN_WIDTHS,
    LEARNING_RATES,
    LOT_SIZES,
    LR_SCHEDULES,
    OPTIMIZERS,
    PCA_NOISES,
    PRESETS,
    ROUNDS,
    SIGMA_MODE,
    SIGMAS,
    TARGET_MODE,
    THRESHOLDS,
    form_values,
)
from engine.training import DATASETS

__all__ = ["EPSILONS", "dataset_note", "plan_summary", "spec_form"]
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
CALIBRATION_TITLES = {"rdp": "RDP (instant)", "pld": "PLD (tightest)"}
OPTIMIZER_TITLES = {"sgd": "SGD", "momentum": "SGD with momentum 0.9", "adam": "Adam"}
PREFIX = "train_"  # session-state keys of this form: the pages share one session state


def key(name: str) -> str:
    return PREFIX + name


def _value(name: str) -> Any:
    return st.session_state[key(name)]


def _apply_preset() -> None:
    for name, value in form_values(PRESETS[st.session_state[key("preset")]].spec).items():
        st.session_state[key(name)] = value


def _keep_values() -> None:
    """Streamlit forgets the value of a widget that is not drawn in a run (the hidden-layer width while the
    model is logistic regression, say): writing each value back keeps them all for when they reappear."""
    state = st.session_state
    if key("preset") not in state:
        state[key("preset")] = DEFAULT_PRESET
        _apply_preset()
    for name, default in FORM_DEFAULTS.items():
        state[key(name)] = state.get(key(name), default)


def _coerce(name: str, allowed: list) -> None:
    """Keep a choice valid when an earlier choice narrowed its options (no model 'cnn' on Adult)."""
    if _value(name) not in allowed:
        st.session_state[key(name)] = allowed[-1] if name == "pca_dims" else allowed[0]


def _slider(label: str, options: list, name: str, *, help: str, **options_format) -> None:
    """A select slider over `options` for the form field `name`."""
    st.select_slider(label, options, key=key(name), help=help, **options_format)


def _choice(widget, label: str, name: str, options: list, titles: dict[str, str], help: str) -> None:
    """A selectbox or radio over `options` (kept valid by `_coerce`), each shown by its title."""
    _coerce(name, options)
    widget(label, options, key=key(name), format_func=titles.get, help=help)


def _dataset_label(name: str) -> str:
    if name not in DATASETS:  # a CSV upload
        return f"{services.training_datasets()[name].label} (your upload)"
    title = DATASETS[name].title
    return f"{title} — not downloaded" if services.missing_dataset_files(name) else title


def _chosen_dataset() -> services.TrainingDataset:
    return services.training_datasets()[_value("dataset")]


def spec_form() -> dict[str, Any]:
    """The sidebar form; returns the raw spec it describes (validated later, by the engine)."""
    _keep_values()
    with st.sidebar:
        preset_picker()
        algorithm_picker()
        if train_spec.learner(_value("algorithm")):
            dataset_picker()
            learner_fields()
        else:
            data_and_model()
            if train_spec.private(_value("algorithm")):
                privacy()
            else:
                st.caption("No clipping and no noise: ε = ∞. Its accuracy is the reference the private runs pay for.")
            training()
            advanced()
    chosen = _chosen_dataset()
    return train_spec.raw_spec({name: _value(name) for name in FORM_DEFAULTS}, chosen.info, chosen.schema)


def preset_picker() -> None:
    st.selectbox(
        "Preset",
        list(PRESETS),
        key=key("preset"),
        on_change=_apply_preset,
        help="Fills every field below with a configuration known to work; each field can still be changed.",
    )
    st.caption(PRESETS[_value("preset")].source)


def algorithm_picker() -> None:
    st.selectbox(
        "Algorithm",
        list(train_spec.ALGORITHM_TITLES),
        key=key("algorithm"),
        format_func=train_spec.ALGORITHM_TITLES.get,
        help="DP-SGD and noisy GD are private (clipping plus noise); the non-private baseline shows the "
        "accuracy that privacy costs.",
    )


def dataset_picker() -> None:
    algorithm = _value("algorithm")
    available = services.training_datasets()
    datasets = train_spec.datasets_for(algorithm, {name: found.info for name, found in available.items()})
    _coerce("dataset", datasets)
    here = [d for d in datasets if not services.missing_dataset_files(d)]
    st.selectbox(
        "Dataset",
        here + [d for d in datasets if d not in here],  # what can train offline first
        key=key("dataset"),
        format_func=_dataset_label,
        help="The private training data: a larger N gives more accuracy for the same ε. Digits is built in; "
        "CSV files saved on the Data page are listed too.",
    )


def data_and_model() -> None:
    algorithm = _value("algorithm")
    st.markdown("**Data and model**")
    dataset_picker()
    models = train_spec.models_for(_chosen_dataset().info, algorithm)
    _choice(
        st.selectbox,
        "Model",
        "model",
        models,
        train_spec.MODEL_TITLES,
        "Bigger models can fit better, but the same noise is spread over more parameters.",
    )
    if _value("model") == "mlp":
        _slider(
            "Hidden units",
            HIDDEN_WIDTHS,
            "hidden",
            help="Width of the hidden layer: more capacity, and a noisier gradient per parameter.",
        )
    dims = train_spec.pca_dims_for(_chosen_dataset().info)
    if _value("model") == "cnn" or not dims:
        return
    st.checkbox(
        "Project inputs with PCA" + (" (DP-PCA)" if train_spec.private(algorithm) else ""),
        key=key("use_pca"),
        help="Fewer input dimensions make each gradient less noisy; privately fitted, it spends some ε up front.",
    )
    if _value("use_pca"):
        _coerce("pca_dims", dims)
        st.select_slider(
            "PCA dimensions", dims, key=key("pca_dims"), help="Dimensions kept: fewer denoise more but lose detail."
        )
        if train_spec.private(algorithm):
            _slider(
                "DP-PCA noise σ_p",
                PCA_NOISES,
                "pca_noise",
                help="Noise on the covariance: larger σ_p spends less ε on PCA and gives a blurrier projection.",
            )


def privacy() -> None:
    algorithm = _value("algorithm")
    st.markdown("**Privacy**")
    st.radio(
        "Set privacy by",
        [TARGET_MODE, SIGMA_MODE],
        key=key("mode"),
        horizontal=True,
        help="Either pick the ε you can afford (σ is calibrated to meet it) or pick σ and see the ε it gives.",
    )
    if _value("mode") == TARGET_MODE:
        _slider(
            "Target ε",
            EPSILONS,
            "target_epsilon",
            help="Privacy budget: a smaller ε is stronger privacy and needs more noise, so less accuracy. "
            "Log scale, 0.1 to 10.",
        )
        _choice(
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
        _slider(
            "Noise multiplier σ",
            SIGMAS,
            "noise_multiplier",
            help="Noise std divided by C: a larger σ gives more privacy (smaller ε) and noisier updates.",
        )
    _slider(
        "δ",
        DELTAS,
        "delta",
        format_func=lambda d: f"{d:.0e}",
        help="Probability that the ε guarantee may fail: keep it well below 1/N; a smaller δ costs a little ε.",
    )
    _choice(st.radio, "Noise", "noise", list(train_spec.NOISE_TITLES), train_spec.NOISE_TITLES, train_spec.NOISE_HELP)
    _slider(
        "Clipping bound b" if algorithm == "noisy_gd" else "Clipping norm C",
        CLIP_NORMS,
        "clip_norm",
        help="Each example's gradient is scaled to L2 norm ≤ C, bounding one person's influence: a small C "
        "biases the gradient, a large C needs more noise.",
    )
    if algorithm == "noisy_gd":
        _slider(
            "ε of the noisy count",
            COUNT_EPSILONS,
            "count_epsilon",
            help="Noisy GD divides by a Laplace-noised N, charged up front: a larger share of ε makes it more exact.",
        )


def training() -> None:
    st.markdown("**Training**")
    if _value("algorithm") != "noisy_gd":
        _slider(
            "Lot size L" if _value("algorithm") in ("dpsgd", "aniso_dpsgd") else "Batch size",
            LOT_SIZES,
            "lot_size",
            help="Expected examples per step (each joins with probability L/N): larger lots average out the "
            "noise but spend more privacy per step.",
        )
    _slider(
        "Epochs",
        EPOCHS,
        "epochs",
        help="Passes over the data: more steps can fit better, and every step spends ε.",
    )
    _slider(
        "Learning rate",
        LEARNING_RATES,
        "lr",
        help="SGD step size: post-processing, so it changes accuracy but never ε.",
    )
    st.selectbox(
        "Learning-rate schedule",
        LR_SCHEDULES,
        key=key("lr_schedule"),
        format_func={"constant": "Constant", "linear": "Linear decay"}.get,
        help="Decaying the step size lets noisy SGD settle; it costs no privacy.",
    )
    if _value("lr_schedule") == "linear":
        left, right = st.columns(2)
        left.number_input(
            "to × lr",
            0.01,
            1.0,
            step=0.01,
            key=key("lr_end_factor"),
            help="The final learning rate as a fraction of the first (seed 003: 0.52).",
        )
        right.number_input(
            "over epochs",
            0.5,
            1000.0,
            step=1.0,
            key=key("lr_decay_epochs"),
            help="Epochs over which the rate decays linearly, then stays.",
        )
    st.number_input(
        "Seed",
        0,
        2**31 - 1,
        key=key("seed"),
        help="Fixes the initialization; in the reproducible noise mode the whole spec fixes the lots and noise.",
    )


def learner_fields() -> None:
    """A textbook learner: its budget (target ε, δ) and its own few fields; no model, lots, clipping or σ."""
    algorithm = _value("algorithm")
    st.markdown("**Privacy**")
    _slider(
        "Target ε",
        EPSILONS,
        "target_epsilon",
        help="The budget the learner's mechanism spends (log scale, 0.1 to 10); every accountant then bounds "
        "what it did, and the run reports the tightest.",
    )
    _slider(
        "δ",
        DELTAS,
        "delta",
        format_func=lambda d: f"{d:.0e}",
        help="Probability that the guarantee may fail: keep it well below 1/N; RWM's η depends on it.",
    )
    st.markdown("**Learner**")
    if algorithm == "sq_laplace":
        _slider(
            "Iterations T",
            EPOCHS,
            "epochs",
            help="Full-batch steps, each asking d noisy queries: more iterations, more noise in each.",
        )
        _slider("Learning rate", LEARNING_RATES, "lr", help="Step size on the noisy gradient: post-processing, no ε.")
    else:
        _slider(
            "Thresholds per feature",
            THRESHOLDS,
            "thresholds",
            help="Stumps test one feature against one of these evenly spaced thresholds on [0, 1] (a public "
            "grid): more hypotheses fit better, and cost log|H| in the error bound.",
        )
    if algorithm in ("rwm_online", "rwm_linear"):
        _slider(
            "Rounds T",
            ROUNDS,
            "rounds",
            format_func=lambda t: f"{t:,}" if t else "all (N)",
            help="One training example per round; more rounds shrink η = ε/√(32 T ln(1/δ)).",
        )
    st.number_input(
        "Seed",
        0,
        2**31 - 1,
        key=key("seed"),
        help="Fixes the mechanism's randomness: the same spec and seed give the same output.",
    )


def advanced() -> None:
    algorithm = _value("algorithm")
    with st.expander("Advanced"):
        if modes := train_spec.clipping_modes(algorithm):
            _choice(
                st.radio,
                "Clipping",
                "clipping",
                modes,
                train_spec.CLIPPING_TITLES,
                "What is bounded per example: the privacy cost is the same, the bias differs.",
            )
        _choice(
            st.selectbox,
            "Optimizer",
            "optimizer",
            OPTIMIZERS,
            OPTIMIZER_TITLES,
            "How the noisy gradient becomes an update: post-processing, so no effect on ε.",
        )
        if algorithm == "aniso_dpsgd":
            _choice(
                st.radio,
                "Noise weights",
                "aniso_granularity",
                list(train_spec.ANISO_GRANULARITY_TITLES),
                train_spec.ANISO_GRANULARITY_TITLES,
                "Per layer uses the fast norms; per coordinate shapes the "
                "noise finer, at the cost of per-example gradients.",
            )
            _slider(
                "Smoothing β",
                ANISO_SMOOTHINGS,
                "aniso_smoothing",
                help="Weight of the past in the running average of released gradients the weights come from.",
            )
            _slider(
                "Largest weight ratio r",
                ANISO_MAX_RATIOS,
                "aniso_max_ratio",
                help="Weights stay within [1/r, r]: r = 1 is isotropic DP-SGD.",
            )


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
        bottom[1].metric(
            "ε after training (PLD)",
            f"{preview.pld_epsilon:.3f}",
            help=f"An upper bound by the PLD accountant, which calibrated σ (RDP gives {preview.epsilon:.3f}; the "
            "curve beside is RDP's); the finished run reports the tightest of all accountants, never more.",
        )
    else:
        bottom[1].metric(
            "ε after training (RDP)",
            f"{preview.epsilon:.3f}",
            help=f"An upper bound by the RDP accountant (best order {preview.best_order:g}), up-front releases "
            "included; the finished run reports the tightest of all accountants, never more.",
        )
    pld = (preview.pld_curve_steps, preview.pld_curve_epsilons) if preview.pld_curve_steps else None
    figure = charts.planned_epsilon_figure(
        preview.curve_steps, preview.curve_epsilons, target_epsilon=target_epsilon, pld=pld
    )
    course.plotly_chart(figure, key="train_planned_epsilon", config={"displayModeBar": False})

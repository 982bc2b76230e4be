"""The Train form's less common fields: a textbook learner's few fields, and the Advanced expander (clipping mode,
optimizer, anisotropic-noise weights and a one-run audit of ε with canaries). Widgets only describe a spec."""

import json

import streamlit as st

from app import services
from app.train import widget_spec
from app.train.presets import ANISO_MAX_RATIOS, ANISO_SMOOTHINGS, FORM_DEFAULTS, OPTIMIZERS, ROUNDS, THRESHOLDS
from app.train.session_fields import KEEP, choice, field_note, field_value, key, number, seed, slider
from engine.privacy.auditing import CANARY_KINDS, audit_ceiling
from engine.training.config.audit import AUDIT_CANARIES

OPTIMIZER_TITLES = {"sgd": "SGD", "momentum": "SGD with momentum 0.9", "adam": "Adam"}


def learner_fields() -> None:
    """A textbook learner: its budget (target ε, δ) and its own few fields; no model, lots, clipping or σ."""
    algorithm = field_value("algorithm")
    st.markdown("**Privacy**")
    number(
        "Target ε",
        "target_epsilon",
        step=0.1,
        format="%g",
        help="The budget the learner's mechanism spends ; every accountant then bounds "
        "what it did, and the run reports the tightest.",
    )
    number(
        "δ",
        "delta",
        step=1e-6,
        format="%.1e",
        help="Probability that the guarantee may fail: keep it well below 1/N; RWM's η depends on it.",
    )
    st.markdown("**Learner**")
    if algorithm == "sq_laplace":
        number(
            "Iterations T",
            "epochs",
            step=1.0,
            format="%g",
            help="Full-batch steps, each asking d noisy queries: more iterations, more noise in each.",
        )
        number(
            "Learning rate", "lr", step=0.1, format="%g", help="Step size on the noisy gradient: post-processing, no ε."
        )
    else:
        slider(
            "Thresholds per feature",
            THRESHOLDS,
            "thresholds",
            help="Stumps test one feature against one of these evenly spaced thresholds on [0, 1] (a public "
            "grid): more hypotheses fit better, and cost log|H| in the error bound.",
        )
    if algorithm in ("rwm_online", "rwm_linear"):
        slider(
            "Rounds T",
            ROUNDS,
            "rounds",
            format_func=lambda t: f"{t:,}" if t else "all (N)",
            help="One training example per round; more rounds shrink η = ε/√(32 T ln(1/δ)).",
        )
    seed(help="Fixes the mechanism's randomness: the same spec and seed give the same output.")


def advanced() -> None:
    algorithm = field_value("algorithm")
    with st.expander("Advanced"):
        if modes := widget_spec.clipping_modes(algorithm):
            choice(
                st.radio,
                "Clipping",
                "clipping",
                modes,
                widget_spec.CLIPPING_TITLES,
                "What is bounded per example: the privacy cost is the same, the bias differs.",
            )
        choice(
            st.selectbox,
            "Optimizer",
            "optimizer",
            OPTIMIZERS,
            OPTIMIZER_TITLES,
            "How the noisy gradient becomes an update: post-processing, so no effect on ε.",
        )
        st.number_input(
            "Physical batch size",
            step=64,
            key=key("physical_batch_size"),
            persist_state=KEEP,
            help="Examples per forward pass (0: the whole lot at once): a lot is split into batches whose clipped sums "
            "add up before the one noise draw, so the release and ε are the same; it bounds memory, which augmentation "
            "multiplicity and wide models need. 0, or any whole number in [1, 1,000,000].",
        )
        field_note("physical_batch_size", "Physical batch size")
        if algorithm == "aniso_dpsgd":
            choice(
                st.radio,
                "Noise weights",
                "aniso_granularity",
                list(widget_spec.ANISO_GRANULARITY_TITLES),
                widget_spec.ANISO_GRANULARITY_TITLES,
                "Per layer uses the fast norms; per coordinate shapes the "
                "noise finer, at the cost of per-example gradients.",
            )
            slider(
                "Smoothing β",
                ANISO_SMOOTHINGS,
                "aniso_smoothing",
                help="Weight of the past in the running average of released gradients the weights come from.",
            )
            slider(
                "Largest weight ratio r",
                ANISO_MAX_RATIOS,
                "aniso_max_ratio",
                help="Weights stay within [1/r, r]: r = 1 is isotropic DP-SGD.",
            )
        if widget_spec.auditable(algorithm):
            audit_fields()


CANARIES_FITTED = "train_canaries_fitted"  # the count the audit last started at for the model then chosen


def fitted_canaries() -> int | None:
    """The canary count that fits the chosen model: min(the default count, its trainable coordinates), at least the
    smallest audit (gradient canaries take one coordinate each: digits' logistic regression has 650). None when
    the spec is invalid without its audit (the engine's reason is shown by the field that is wrong)."""
    chosen = services.training_datasets()[field_value("dataset")]
    raw = widget_spec.raw_spec({name: field_value(name) for name in FORM_DEFAULTS}, chosen.info, chosen.schema)
    coordinates = services.model_coordinates(json.dumps(raw, sort_keys=True))
    if coordinates is None:
        return None
    return max(AUDIT_CANARIES[0], min(FORM_DEFAULTS["audit_canaries"], coordinates))


def follow_the_model() -> None:
    """The canary count follows the chosen model while it is a default (the form's, or the count fitted to the
    model before): a new model, a new width or PCA refit it; a count typed by hand is kept as typed, and one the
    model cannot take disables Train with the engine's reason under the field."""
    fitted = fitted_canaries()
    if fitted is None:
        return
    state = st.session_state
    if field_value("audit_canaries") in (FORM_DEFAULTS["audit_canaries"], state.get(CANARIES_FITTED)):
        state[key("audit_canaries")] = fitted
    state[CANARIES_FITTED] = fitted


def audit_fields() -> None:
    """A one-run audit: canaries whose membership the released run is scored on, for a lower bound ε̂ beside ε."""
    st.checkbox(
        "Audit ε with canaries",
        key=key("audit"),
        persist_state=KEEP,
        help="Adds canaries, each in the training data with probability ½, and scores them after training: how "
        "many memberships can be guessed gives ε̂, a lower bound on the true ε at 95% confidence (Steinke, Nasr "
        "& Jagielski 2023). It never changes ε; an ε̂ near ε would mean the bound is tight, one above it a bug.",
    )
    if not field_value("audit"):
        return
    follow_the_model()
    low, high = AUDIT_CANARIES
    st.number_input(
        "Canaries m",
        step=100,
        key=key("audit_canaries"),
        persist_state=KEEP,
        help=f"More canaries can show a larger ε̂: m canaries never show more than their ceiling (at δ = 1e-5: "
        f"{audit_ceiling(100, delta=1e-5):.2f} for 100, {audit_ceiling(1000, delta=1e-5):.2f} for 1,000). "
        f"Any whole number in [{low:,}, {high:,}], and gradient canaries at most one per trainable coordinate of "
        "the model (the count starts there).",
    )
    field_note("audit_canaries", "Canaries m")
    choice(
        st.radio,
        "Canaries",
        "audit_kind",
        list(CANARY_KINDS),
        CANARY_KINDS,
        "Gradient canaries are added to the clipped sum of each lot they join and read from the released noisy "
        "sums (white-box, the strongest); input canaries are odd inputs trained on like any example and scored by "
        "the final model's loss (black-box).",
    )

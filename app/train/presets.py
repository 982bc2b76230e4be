"""The Train page's presets, as run specs, and the values its widgets offer.

Each preset is the spec of a published or benchmarked setting, copied from `bench/utility_runs.py`
(tests/app/train/test_train_page.py checks they still agree): the app does not import the benchmark package.
"""

import math
from dataclasses import dataclass
from typing import Any

from app.common.choices import AUGMENTATION_MULTIPLICITIES, EMA_DECAYS
from engine.privacy.auditing import CANARY_KINDS
from engine.training.config.examples import digits_demo_spec, scatternet_cnn_spec
from engine.training.config.keys import RANGES
from engine.training.models import wide_resnet

DELTAS = [1e-7, 1e-6, 1e-5, 1e-4]
CLIP_NORMS = [0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0]
SIGMAS = [0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.3, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0]
LEARNING_RATES = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 4.0]
LOT_SIZES = [8, 16, 32, 64, 128, 240, 256, 512, 600, 1024, 2048, 4096]
EPOCHS = [1, 2, 3, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 150, 200, 300, 400]
HIDDEN_WIDTHS = [32, 64, 128, 256, 512, 1000]
PCA_DIMS = [10, 20, 30, 40, 50, 60, 80, 100]
PCA_NOISES = [2.0, 4.0, 7.0, 16.0, 32.0]
COUNT_EPSILONS = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
OPTIMIZERS = ["sgd", "momentum", "adam"]
LR_SCHEDULES = ["constant", "linear"]
FEATURES = ["pixels", "scatternet"]
WRN_DEPTHS = list(wide_resnet.DEPTHS)
WRN_WIDTHS = [1, 2, 4, 6, 8, 10]

# Every widget of the form (its session-state key) and its value when a spec does not set it.
FORM_DEFAULTS: dict[str, Any] = dict(
    algorithm="dpsgd",
    dataset="digits",
    model="logreg",
    features="pixels",
    hidden=128,
    wrn_depth=16,
    wrn_width=4,
    use_pca=False,
    pca_dims=60,
    pca_noise=7.0,
    mode="Target ε",
    target_epsilon=3.0,
    calibration_accountant="rdp",
    noise_multiplier=1.0,
    delta=1e-5,
    clip_norm=1.0,
    clipping="flat",
    count_epsilon=0.01,
    lot_size=64,
    epochs=20,
    lr=2.0,
    lr_schedule="constant",
    lr_end_factor=0.5,
    lr_decay_epochs=10.0,
    optimizer="sgd",
    augmentation_multiplicity=1,
    physical_batch_size=0,
    ema_decay=0.0,
    seed=0,
    thresholds=16,
    rounds=0,
    aniso_granularity="layer",
    aniso_smoothing=0.9,
    aniso_max_ratio=10.0,
    noise="reproducible",
    audit=False,
    audit_canaries=1000,
    audit_kind="gradient",
)
THRESHOLDS = [4, 8, 16, 32, 64]
ROUNDS = [0, 1_000, 2_000, 5_000, 10_000, 20_000]  # 0: every training example, one round each
ANISO_SMOOTHINGS = [0.0, 0.5, 0.8, 0.9, 0.95, 0.99]
ANISO_MAX_RATIOS = [1.0, 2.0, 5.0, 10.0, 20.0, 100.0]
TARGET_MODE, SIGMA_MODE, FILL_MODE = "Target ε", "Noise multiplier σ", "Fill ε with σ"


@dataclass(frozen=True)
class Preset:
    spec: dict[str, Any]
    source: str  # one line: where the setting comes from


DIGITS_DEMO = digits_demo_spec()
PRESETS: dict[str, Preset] = {
    "Digits demo: logistic regression, ε = 3": Preset(
        DIGITS_DEMO, "scikit-learn's built-in 8×8 digits (no download): DP-SGD trains in seconds on a CPU."
    ),
    "Digits MLP (128 ReLU units), ε = 3": Preset(
        DIGITS_DEMO | {"model": "mlp", "hidden": [128], "lr": 1.0}, "A small MLP on the built-in digits."
    ),
    "MNIST as in Abadi et al.: DP-PCA 60 + MLP 1000, each layer clipped at 4, fills ε = 2": Preset(
        {
            "dataset": "mnist",
            "model": "mlp",
            "hidden": [1000],
            "algorithm": "dpsgd",
            "pca_dims": 60,
            "pca_noise": 7.0,
            "target_epsilon": 2.0,
            "noise_multiplier": 4.0 / math.sqrt(2),
            "fill_budget": True,
            "delta": 1e-5,
            "clipping": "per_layer",
            "clip_norm": 4.0 * math.sqrt(2),
            "lot_size": 600,
            "epochs": 400,
            "lr": 0.1,
            "lr_schedule": {"kind": "linear", "end_factor": 0.52, "epochs": 10},
            "ema_decay": 0.999,
            "seed": 0,
        },
        "Abadi et al. 2016 §5.2, medium noise: DP-PCA to 60 dims (σ_p = 7), 1,000 ReLU units, lots of 600, each layer "
        "clipped at 4 (per layer, C = 4√2) with noise std 16 (σ = 4/√2 of C), lr 0.1 → 0.052 over 10 epochs, averaged "
        "iterates, trained until ε = 2 by the tightest accountant (≈ 172 epochs, 17,200 steps). Expect ≈ 95% (the "
        "paper: 95%); ≈ 5 min on one core of this CPU, under a minute on a GPU (not yet measured).",
    ),
    "MNIST, ε = 3: ScatterNet + CNN, averaged iterates": Preset(
        scatternet_cnn_spec("mnist", seed=0),
        "Tramèr & Boneh 2021 (ScatterNet + CNN: L 1024, lr 1, momentum 0.9, C 0.1, σ 1.35; they report 98.7% at "
        "ε = 3) with De et al. 2022's moving average of the iterates (β 0.999), trained until ε = 3 (≈ 39 epochs, "
        "2,272 steps). Expect ≈ 98.6% (seed 0 here); ≈ 30 min on one core of this CPU after the features (≈ 6 min, "
        "once); GPU time not yet measured.",
    ),
    "Fashion-MNIST, ε = 3: ScatterNet + CNN, averaged iterates": Preset(
        scatternet_cnn_spec("fashion-mnist", seed=0),
        "Tramèr & Boneh 2021 (ScatterNet + CNN: L 2048, lr 4, momentum 0.9, C 0.1, σ 2.15; 89.0% at ε = 3, their "
        "linear model 89.7%) with the moving average of the iterates (β 0.999), up to 60 epochs within ε = 3 "
        "(1,758 steps, ε 2.99). ≈ 45 min on one core of this CPU after the features; GPU time not yet measured.",
    ),
    "CIFAR-10, ε = 1: WRN-16-4, augmentation ×16, averaged (De et al.)": Preset(
        {
            "dataset": "cifar10",
            "model": "wrn",
            "wrn_depth": 16,
            "wrn_width": 4,
            "algorithm": "dpsgd",
            "delta": 1e-5,
            "clip_norm": 1.0,
            "target_epsilon": 1.0,
            "noise_multiplier": 10.0,
            "fill_budget": True,
            "epochs": 72,
            "augmentation_multiplicity": 16,
            "ema_decay": 0.999,
            "lot_size": 4096,
            "lr": 2.0,
            "physical_batch_size": 256,
            "seed": 0,
        },
        "De et al. 2022 (jax_privacy's cifar10_wrn_16_4_eps1: lots of 4096, σ 10, C 1, lr 2, 875 steps, K 16 crops "
        "and flips, EMA 0.999; they report 56.8%), trained until ε = 1. Needs the CIFAR-10 files and a GPU: hours "
        "there (not yet measured), days on this CPU.",
    ),
    "Opacus MNIST example: CNN, σ = 1.3": Preset(
        {
            "dataset": "mnist",
            "model": "cnn",
            "algorithm": "dpsgd",
            "delta": 1e-5,
            "lot_size": 240,
            "seed": 0,
            "noise_multiplier": 1.3,
            "clip_norm": 1.5,
            "lr": 0.25,
            "epochs": 15,
        },
        "Opacus examples/mnist_README.md, first row: q = 0.004 (L = 240), σ = 1.3, C = 1.5, lr 0.25, 15 epochs "
        "(their README: ε = 1.16, 94.6%); our CNN uses tanh where theirs uses ReLU.",
    ),
    "Adult: noisy gradient descent (Near & Abuah), ε = 1": Preset(
        {
            "dataset": "adult",
            "model": "logreg",
            "algorithm": "noisy_gd",
            "clipping": "gradient",
            "clip_norm": 3.0,
            "epochs": 30,
            "lr": 1.0,
            "seed": 0,
            "delta": 1e-5,
            "target_epsilon": 1.0,
            "count_epsilon": 0.1,
        },
        "Near & Abuah, Programming Differential Privacy, ch. Machine Learning: full-batch logistic regression, "
        "30 iterations, b = 3, a tenth of ε on the noisy count.",
    ),
    "Adult: DP-SGD logistic regression, ε = 1": Preset(
        {
            "dataset": "adult",
            "model": "logreg",
            "algorithm": "dpsgd",
            "target_epsilon": 1.0,
            "delta": 1e-6,
            "clip_norm": 1.0,
            "lot_size": 256,
            "epochs": 5,
            "lr": 1.0,
            "seed": 0,
        },
        "DP-SGD logistic regression on UCI Adult, one-hot features (benchmarked at ≥ 84% test accuracy).",
    ),
    "Digits: anisotropic noise (per layer), ε = 3": Preset(
        DIGITS_DEMO | {"algorithm": "aniso_dpsgd"},
        "The digits demo with anisotropic noise (Xiang et al.), honestly accounted: weights from released "
        "gradients, clipping in the weighted norm, the same ε as isotropic DP-SGD.",
    ),
    "Adult: exponential mechanism over decision stumps, ε = 1": Preset(
        {
            "dataset": "adult",
            "algorithm": "expmech_stumps",
            "target_epsilon": 1.0,
            "delta": 1e-6,
            "thresholds": 16,
            "seed": 0,
        },
        "Dwork & Roth ch. 11: private PAC learning, one decision stump drawn by the exponential mechanism.",
    ),
    "Adult: SQ logistic regression via Laplace noise, ε = 1": Preset(
        {
            "dataset": "adult",
            "algorithm": "sq_laplace",
            "target_epsilon": 1.0,
            "delta": 1e-6,
            "epochs": 10,
            "lr": 2.0,
            "seed": 0,
        },
        "Dwork & Roth §11.1: gradient descent that sees the data only through Laplace-noised statistical queries.",
    ),
    "Adult: private online learning (RWM), ε = 1": Preset(
        {
            "dataset": "adult",
            "algorithm": "rwm_online",
            "target_epsilon": 1.0,
            "delta": 1e-6,
            "thresholds": 16,
            "seed": 0,
        },
        "Dwork & Roth Thms 11.1–11.3: randomized weighted majority over stump experts, one round per example.",
    ),
    "Adult: private linear learner, ε = 1": Preset(
        {
            "dataset": "adult",
            "algorithm": "rwm_linear",
            "target_epsilon": 1.0,
            "delta": 1e-6,
            "thresholds": 16,
            "seed": 0,
        },
        "Dwork & Roth Algorithm 17 / Thm 11.6: RWM over the simplex's vertices, the average action as output.",
    ),
}
DEFAULT_PRESET = next(iter(PRESETS))

# Fields typed as numbers: any value in the engine's range (`RANGES`).
TYPED = ("target_epsilon", "noise_multiplier", "delta", "clip_norm", "lr", "lot_size", "epochs")
# A spec value must be one a widget offers (select sliders only take their options).
OPTIONS: dict[str, list] = {
    "hidden": HIDDEN_WIDTHS,
    "pca_dims": PCA_DIMS,
    "pca_noise": PCA_NOISES,
    "count_epsilon": COUNT_EPSILONS,
    "optimizer": OPTIMIZERS,
    "thresholds": THRESHOLDS,
    "aniso_smoothing": ANISO_SMOOTHINGS,
    "aniso_max_ratio": ANISO_MAX_RATIOS,
    "features": FEATURES,
    "wrn_depth": WRN_DEPTHS,
    "wrn_width": WRN_WIDTHS,
    "augmentation_multiplicity": AUGMENTATION_MULTIPLICITIES,
    "ema_decay": EMA_DECAYS,
}


class PresetError(ValueError):
    """A spec holds a value the form cannot show."""


SHOWN_ELSEWHERE = (
    "rounds",
    "hidden",
    "lr_schedule",
    "schema",
    "data_sha256",
    "audit",
    "fill_budget",
)  # read below, or the upload's own
NO_EFFECT = {"noise_schedule": {"kind": "constant"}, "clip_schedule": {"kind": "constant"}, "fill_budget": False}


def same_kind(value: Any, default: Any) -> bool:
    """A value of the type the form field holds: text for a choice, a number (not a bool) for a number."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, type(default))


def form_values(spec: dict[str, Any]) -> dict[str, Any]:
    """The widget values that describe `spec` (the inverse of `widget_spec.raw_spec`)."""
    values = dict(FORM_DEFAULTS)
    plain = (
        "algorithm",
        "dataset",
        "model",
        "delta",
        "clip_norm",
        "clipping",
        "count_epsilon",
        "lot_size",
        "epochs",
        "lr",
        "optimizer",
        "seed",
        "target_epsilon",
        "calibration_accountant",
        "noise_multiplier",
        "pca_dims",
        "pca_noise",
        "thresholds",
        "aniso_granularity",
        "aniso_smoothing",
        "aniso_max_ratio",
        "noise",
        "features",
        "wrn_depth",
        "wrn_width",
        "augmentation_multiplicity",
        "ema_decay",
        "physical_batch_size",
    )
    if unknown := [k for k in spec if k not in (*plain, *SHOWN_ELSEWHERE) and spec[k] != NO_EFFECT.get(k, ...)]:
        raise PresetError(f"{unknown[0]}: the form cannot show this key (set it in a spec file and use the CLI)")
    for name in plain:
        if name in spec and not same_kind(spec[name], FORM_DEFAULTS[name]):
            raise PresetError(f"{name}: {spec[name]!r} is not a value the form can show")
    values |= {key: spec[key] for key in plain if key in spec}
    if "rounds" in spec:
        values["rounds"] = spec["rounds"]
    if "hidden" in spec:
        if len(spec["hidden"]) != 1:
            raise PresetError(f"hidden: the form has one hidden layer, the spec {spec['hidden']}")
        values["hidden"] = spec["hidden"][0]
    values["use_pca"] = "pca_dims" in spec
    values["mode"] = SIGMA_MODE if "noise_multiplier" in spec else TARGET_MODE
    if spec.get("fill_budget") is True:
        values["mode"] = FILL_MODE
    if "audit" in spec:
        audit = spec["audit"]
        if not (isinstance(audit, dict) and same_kind(audit.get("canaries"), 1) and audit.get("kind") in CANARY_KINDS):
            raise PresetError(f"audit: {audit!r:.80} is not an audit the form can show")
        values |= {"audit": True, "audit_canaries": int(audit["canaries"]), "audit_kind": audit["kind"]}
    schedule = spec.get("lr_schedule", {"kind": "constant"})
    kind = schedule.get("kind") if isinstance(schedule, dict) else None
    values["lr_schedule"] = kind
    if kind == "linear" and same_kind(schedule.get("end_factor"), 1.0) and same_kind(schedule.get("epochs"), 1.0):
        values["lr_end_factor"], values["lr_decay_epochs"] = schedule["end_factor"], schedule["epochs"]
    elif kind != "constant":
        raise PresetError(f"lr_schedule: the form offers constant and linear schedules, the spec {schedule!r:.80}")
    for key, options in OPTIONS.items():
        if values[key] not in options:
            raise PresetError(f"{key}: {values[key]!r} is not among the form's values {options}")
    for key in TYPED:
        if problem := RANGES[key].problem(values[key]):
            raise PresetError(f"{key} {problem}")
    return values

"""From the Train form's widget values to a raw run spec, and which choices fit which (pure: no Streamlit).

Only the keys that apply to the chosen algorithm and model go into the spec; the engine validates the rest.
"""

from collections.abc import Mapping
from typing import Any

from app.train.presets import FILL_MODE, PCA_DIMS, TARGET_MODE
from engine.training import DATASETS
from engine.training.config.keys import CLIPPING_MODES, Algorithm
from engine.training.datasets import DatasetInfo
from engine.training.features import scatternet
from engine.training.models.registry import MODELS, models_taking

FEATURE_TITLES = {"pixels": "Pixels", "scatternet": "ScatterNet (Tramèr & Boneh 2021)"}

ANISO_GRANULARITY_TITLES = {"layer": "one weight per layer", "coordinate": "one weight per coordinate"}
NOISE_TITLES = {"reproducible": "Reproducible (lab)", "release": "Release (OS randomness)"}
NOISE_HELP = (
    "Reproducible: lots and noise come from streams derived from the whole spec, so the same spec trains to the same "
    "numbers (and is served from the result cache), but anyone holding the run record can regenerate the noise: "
    "not for publishing the model as differentially private. Release: every lot and noise draw is seeded by the "
    "operating system's cryptographic randomness with a hardened Gaussian sampler, nothing stored regenerates it; "
    "a rerun gives other numbers, and each step costs a little more time. Neither changes ε."
)
CLIPPING_TITLES = {
    "flat": "flat: the whole gradient to norm C",
    "per_layer": "per layer: each layer to C/√K",
    "gradient": "per-example gradients to norm b",
    "input": "inputs to norm b (no per-example gradients)",
}


def private(algorithm: str) -> bool:
    return Algorithm(algorithm).private


def learner(algorithm: str) -> bool:
    """A textbook learner (Dwork & Roth ch. 11): a target ε, δ and its own few fields; no model, lots or clipping."""
    return Algorithm(algorithm).learner


def auditable(algorithm: str) -> bool:
    """A one-run audit with canaries is offered for DP-SGD (`engine.training.canaries`)."""
    return Algorithm(algorithm) is Algorithm.DPSGD


def datasets_for(algorithm: str, infos: Mapping[str, DatasetInfo]) -> list[str]:
    """The datasets of `infos` (registered ones and CSV uploads) the algorithm can train on: noisy GD and the
    textbook learners need two classes."""
    if algorithm == Algorithm.NOISY_GD or learner(algorithm):
        return [name for name, info in infos.items() if info.n_classes == 2]
    return list(infos)


def features_for(info: DatasetInfo, algorithm: str) -> list[str]:
    """What the model sees: pixels, or (images of 16×16 or more, gradient-trained models) ScatterNet features."""
    if algorithm == Algorithm.NOISY_GD or not scatternet.supports(info.image_shape):
        return ["pixels"]
    return ["pixels", "scatternet"]


def models_for(info: DatasetInfo, algorithm: str, features: str = "pixels") -> list[str]:
    """Models that fit, in the registry's order (`models_taking`): noisy GD trains logistic regression only; an image
    model needs images it takes (the CNN 28×28 or more, or ScatterNet features, which it reads as channels; the wide
    ResNet pixels of 8×8 or more)."""
    if algorithm == Algorithm.NOISY_GD:
        return ["logreg"]
    return models_taking(info.image_shape, features)


def augments(values: Mapping[str, Any], info: DatasetInfo) -> bool:
    """Augmentation multiplicity applies to DP-SGD on images seen as pixels, without PCA."""
    return (
        values["algorithm"] == Algorithm.DPSGD
        and info.image_shape is not None
        and values["features"] == "pixels"
        and not uses_pca(values, info)
    )


def clipping_modes(algorithm: str) -> list[str]:
    return list(CLIPPING_MODES.get(Algorithm(algorithm), ()))


def pca_dims_for(info: DatasetInfo) -> list[int]:
    """DP-PCA can keep at most the dataset's number of features."""
    return [d for d in PCA_DIMS if d <= info.n_features]


def takes_projections(model: str) -> bool:
    """Whether a model takes PCA projections (any model that needs no image)."""
    return model in MODELS and not MODELS[model].needs_images


def uses_pca(values: Mapping[str, Any], info: DatasetInfo) -> bool:
    return (
        bool(values["use_pca"])
        and takes_projections(values["model"])
        and values.get("features", "pixels") == "pixels"
        and bool(pca_dims_for(info))
    )


def raw_spec(values: Mapping[str, Any], info: DatasetInfo | None = None, schema: Mapping | None = None) -> dict:
    """The raw spec the widget values describe (validated later, by the engine). `info`: the chosen dataset's
    facts (default: the registered dataset's); `schema`: a CSV upload's declared schema."""
    algorithm, model = values["algorithm"], values["model"]
    if learner(algorithm):
        return learner_raw_spec(values, schema)
    info = info or DATASETS[values["dataset"]]
    raw: dict[str, Any] = {
        "dataset": values["dataset"],
        "model": model,
        "algorithm": algorithm,
        "epochs": values["epochs"],
        "lr": values["lr"],
        "seed": int(values["seed"]),
    }
    if schema is not None:
        raw["schema"] = dict(schema)
    if model == "mlp":
        raw["hidden"] = [int(values["hidden"])]
    if model == "wrn":
        raw |= {"wrn_depth": int(values["wrn_depth"]), "wrn_width": int(values["wrn_width"])}
    if values.get("features", "pixels") != "pixels" and values["features"] in features_for(info, algorithm):
        raw["features"] = values["features"]
    if values.get("physical_batch_size", 0) != 0:  # 0: the whole lot in one pass (the engine judges the rest)
        raw["physical_batch_size"] = int(values["physical_batch_size"])
    if values.get("ema_decay", 0.0) > 0:
        raw["ema_decay"] = float(values["ema_decay"])
    if values.get("augmentation_multiplicity", 1) > 1 and augments(values, info):
        raw["augmentation_multiplicity"] = int(values["augmentation_multiplicity"])
    if algorithm != Algorithm.NOISY_GD:  # noisy GD is full batch
        raw["lot_size"] = int(values["lot_size"])
    if values["optimizer"] != "sgd":
        raw["optimizer"] = values["optimizer"]
    if values["lr_schedule"] == "linear":
        raw["lr_schedule"] = {
            "kind": "linear",
            "end_factor": float(values["lr_end_factor"]),
            "epochs": float(values["lr_decay_epochs"]),
        }
    if uses_pca(values, info):
        raw["pca_dims"] = int(values["pca_dims"])
        if private(algorithm):
            raw["pca_noise"] = values["pca_noise"]
    if not private(algorithm):
        return raw
    raw |= {"delta": values["delta"], "clip_norm": values["clip_norm"]}
    if values["clipping"] in clipping_modes(algorithm)[1:]:  # the first mode is the engine's default
        raw["clipping"] = values["clipping"]
    if values["mode"] == TARGET_MODE:
        raw["target_epsilon"] = values["target_epsilon"]
        if values.get("calibration_accountant", "rdp") != "rdp":  # RDP is the engine's default
            raw["calibration_accountant"] = values["calibration_accountant"]
    elif values["mode"] == FILL_MODE and algorithm == Algorithm.DPSGD:
        # σ fixed, the epochs filled from the budget: the form's epochs are the most it may train
        raw |= {"target_epsilon": values["target_epsilon"], "noise_multiplier": values["noise_multiplier"]}
        raw["fill_budget"] = True
    else:
        raw["noise_multiplier"] = values["noise_multiplier"]
    if values.get("noise", "reproducible") != "reproducible":  # the lab mode is the engine's default
        raw["noise"] = values["noise"]
    if algorithm == Algorithm.NOISY_GD:
        raw["count_epsilon"] = values["count_epsilon"]
    if auditable(algorithm) and values.get("audit"):
        raw["audit"] = {"canaries": int(values["audit_canaries"]), "kind": values["audit_kind"]}
    if algorithm == Algorithm.ANISO_DPSGD:
        raw |= {key: values[key] for key in ("aniso_granularity", "aniso_smoothing", "aniso_max_ratio")}
    return raw


def learner_raw_spec(values: Mapping[str, Any], schema: Mapping | None) -> dict[str, Any]:
    algorithm = Algorithm(values["algorithm"])
    raw: dict[str, Any] = {
        "dataset": values["dataset"],
        "algorithm": algorithm.value,
        "seed": int(values["seed"]),
        "delta": values["delta"],
        "target_epsilon": values["target_epsilon"],
    }
    if schema is not None:
        raw["schema"] = dict(schema)
    if algorithm is Algorithm.SQ_LAPLACE:
        raw |= {"epochs": values["epochs"], "lr": values["lr"]}
    else:
        raw["thresholds"] = int(values["thresholds"])
    if algorithm in (Algorithm.RWM_ONLINE, Algorithm.RWM_LINEAR) and values["rounds"]:
        raw["rounds"] = int(values["rounds"])
    return raw


ALGORITHM_CAPTIONS = {
    "dpsgd": "**DP-SGD** (Abadi et al. 2016): Poisson-sampled lots, per-example clipping and Gaussian noise. ε is "
    "tracked live by the RDP (moments) accountant; the finished run reports the tightest of RDP, PLD and the "
    "composition theorems.",
    "noisy_gd": "**Noisy gradient descent** (Near & Abuah, *Programming Differential Privacy*): full-batch logistic "
    "regression; every step adds Gaussian noise to the clipped gradient sum and divides by a Laplace-noised count. "
    "ε covers both.",
    "nonprivate": "**Non-private baseline**: the same model and optimizer on shuffled batches, without clipping or "
    "noise (ε = ∞): the accuracy the private runs are compared with.",
    "aniso_dpsgd": "**Anisotropic-noise DP-SGD** (Xiang et al., honestly accounted): each gradient is clipped in the "
    "weighted norm ‖W⁻¹g‖₂ ≤ C and gets noise N(0, σ²C²W²), more noise where the loss is insensitive. After the "
    "change of variables W⁻¹ it is DP-SGD at σ, so its ε is DP-SGD's; W comes from earlier released gradients only. "
    "With one layer (logistic regression) per-layer weights are all 1: choose per-coordinate weights (Advanced).",
    "expmech_stumps": "**Exponential mechanism over decision stumps** (Dwork & Roth ch. 11): one stump (feature, "
    "threshold on a public grid, sign) drawn with probability ∝ exp(ε·(−training errors)): ε-DP, one release "
    "(the score only moves one way between neighbours, so no factor ½ is lost).",
    "sq_laplace": "**SQ learning through Laplace noise** (Dwork & Roth §11.1): logistic regression whose every "
    "gradient coordinate is a statistical query answered with Laplace noise; T·d queries share ε by pure "
    "composition, and every accountant then bounds the whole.",
    "rwm_online": "**Private online learning** (Dwork & Roth Thm 11.2 for privacy, 11.1 and 11.3 for regret): "
    "randomized weighted majority over "
    "stump experts, one training example per round, η = ε/√(32 T ln(1/δ)); the regret chart shows the theorem's "
    "bound and non-private RWM on the same stream.",
    "rwm_linear": "**Private linear learner** (Dwork & Roth Algorithm 17, Thm 11.6): RWM over the simplex's vertices "
    "(stump experts); the output is the average action, a mixture of stumps.",
}


def algorithm_caption(algorithm: str) -> str:
    return ALGORITHM_CAPTIONS[algorithm]

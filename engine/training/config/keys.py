"""The tables of the run spec: the algorithms, which keys apply to each and which are required, the
allowed range of every number and the defaults (`engine.training.config.spec` validates a spec by them).

Which keys apply (`KEYS_BY_ALGORITHM`):

- every algorithm: dataset, model, algorithm, epochs, lr, seed, optimizer, momentum, lr_schedule,
  physical_batch_size, pca_dims, hidden (mlp), wrn_depth and wrn_width (wrn), schema (csv:PATH datasets);
- private algorithms (dpsgd, noisy_gd): delta, clip_norm, one of target_epsilon / noise_multiplier,
  clipping, noise_schedule, clip_schedule, pca_noise (with pca_dims), noise ("reproducible" lab mode or
  "release": `engine.training.noise`; the textbook learners take the lab mode only);
- dpsgd and nonprivate: lot_size; noisy_gd: count_epsilon;
- dpsgd: augmentation_multiplicity (K copies per example, De et al. 2022; image datasets with pixel features),
  fill_budget (σ given, the steps filled up to target_epsilon: then both are given, and epochs is the bound);
- dpsgd, aniso_dpsgd, noisy_gd, nonprivate: ema_decay (the released model is the iterates' moving average);
- aniso_dpsgd (Xiang et al.'s noise): DP-SGD's keys without clipping, plus aniso_granularity, aniso_smoothing,
  aniso_max_ratio;
- the textbook learners of Dwork & Roth 2014, ch. 11 (expmech_stumps, sq_laplace, rwm_online, rwm_linear): dataset
  (two classes), model (fixed), seed, delta, target_epsilon, and thresholds / epochs + lr / rounds.
"""

from enum import StrEnum

from engine.privacy import limits
from engine.privacy.limits import NumberRange

FEATURES = ("pixels", "scatternet")


class Algorithm(StrEnum):
    DPSGD = "dpsgd"
    NOISY_GD = "noisy_gd"
    NONPRIVATE = "nonprivate"
    ANISO_DPSGD = "aniso_dpsgd"  # Xiang et al.'s noise, honestly accounted: weighted clipping, anisotropic noise
    EXPMECH_STUMPS = "expmech_stumps"  # Dwork & Roth 2014, ch. 11: textbook learners
    SQ_LAPLACE = "sq_laplace"
    RWM_ONLINE = "rwm_online"
    RWM_LINEAR = "rwm_linear"

    @property
    def private(self) -> bool:
        return self is not Algorithm.NONPRIVATE

    @property
    def learner(self) -> bool:
        """A textbook private learner (Dwork & Roth 2014): it spends a target ε through its own mechanism, not by σ."""
        return self in LEARNER_MODELS


# Each textbook learner has one hypothesis class, named as its model.
LEARNER_MODELS = {
    Algorithm.EXPMECH_STUMPS: "stumps",
    Algorithm.SQ_LAPLACE: "logreg",
    Algorithm.RWM_ONLINE: "experts",
    Algorithm.RWM_LINEAR: "experts",
}
ALGORITHMS = tuple(a.value for a in Algorithm)
CLIPPING_MODES = {Algorithm.DPSGD: ("flat", "per_layer"), Algorithm.NOISY_GD: ("gradient", "input")}
ANISO_GRANULARITIES = ("layer", "coordinate")
DEFAULT_THRESHOLDS = 16  # stumps and experts: thresholds per feature on a public grid over [0, 1]
DEFAULT_COUNT_EPSILON = 0.01  # noisy GD's Laplace count: scale 100, ±0.3% of Adult's N at 95%

RANGES: dict[str, NumberRange] = {
    "target_epsilon": limits.TARGET_EPSILON,
    "noise_multiplier": limits.NOISE_MULTIPLIER,
    "delta": limits.DELTA,
    "clip_norm": NumberRange(low=0.0, high=1000.0, low_open=True),
    "lot_size": NumberRange(low=1, high=1_000_000, integer=True),
    "epochs": NumberRange(low=0.0, high=1000.0, low_open=True),
    "lr": NumberRange(low=0.0, high=1000.0, low_open=True),
    "seed": NumberRange(low=0, high=2**31 - 1, integer=True),
    "momentum": NumberRange(low=0.0, high=1.0, high_open=True),
    "physical_batch_size": NumberRange(low=1, high=1_000_000, integer=True),
    "pca_dims": NumberRange(low=1, high=10_000, integer=True),
    "pca_noise": NumberRange(low=0.0, high=1000.0, low_open=True),
    "count_epsilon": NumberRange(low=0.0, high=10.0, low_open=True),
    "thresholds": NumberRange(low=2, high=256, integer=True),
    "rounds": NumberRange(low=1, high=10_000_000, integer=True),
    "aniso_smoothing": NumberRange(low=0.0, high=1.0, high_open=True),
    "aniso_max_ratio": NumberRange(low=1.0, high=1000.0),
    "wrn_depth": NumberRange(low=10, high=40, integer=True),  # and 6n + 4 (`wide_resnet.depth_problem`)
    "wrn_width": NumberRange(low=1, high=10, integer=True),
    "augmentation_multiplicity": NumberRange(low=1, high=64, integer=True),
    "ema_decay": NumberRange(low=0.0, high=1.0, high_open=True),
}
# Keys whose default switches their feature off: the canonical spec leaves them out at that value, so a spec
# written before they existed keeps its canonical form, its cache key and its noise streams.
OFF_DEFAULTS = {"augmentation_multiplicity": 1, "ema_decay": 0.0, "fill_budget": False}
HIDDEN_WIDTH = NumberRange(low=1, high=8192, integer=True)
MAX_HIDDEN_LAYERS = 4
DEFAULT_HIDDEN = (128,)
SCHEDULES = ("lr_schedule", "noise_schedule", "clip_schedule")

COMMON_KEYS = (
    "dataset",
    "model",
    "algorithm",
    "epochs",
    "lr",
    "seed",
    "optimizer",
    "momentum",
    "lr_schedule",
    "physical_batch_size",
    "pca_dims",
    "hidden",
    "wrn_depth",
    "wrn_width",
    "features",
    "schema",
    "data_sha256",
)
PRIVATE_KEYS = (
    "delta",
    "clip_norm",
    "target_epsilon",
    "noise_multiplier",
    "clipping",
    "noise_schedule",
    "clip_schedule",
    "pca_noise",
    "calibration_accountant",
    "noise",
)
# How the Gaussian-noise algorithms draw their private randomness (`engine.training.noise`)
NOISE_MODES = ("reproducible", "release")
# The accountants σ can be calibrated by for a target ε: RDP (fast, the default) or PLD (tighter: spends the target)
CALIBRATION_ACCOUNTANTS = ("rdp", "pld")
ANISO_KEYS = ("aniso_granularity", "aniso_smoothing", "aniso_max_ratio")
LEARNER_KEYS = ("dataset", "model", "algorithm", "seed", "delta", "target_epsilon", "schema", "data_sha256")
KEYS_BY_ALGORITHM = {
    Algorithm.DPSGD: (
        *COMMON_KEYS,
        *PRIVATE_KEYS,
        "lot_size",
        "audit",
        "augmentation_multiplicity",
        "ema_decay",
        "fill_budget",
    ),
    Algorithm.NOISY_GD: (*COMMON_KEYS, *PRIVATE_KEYS, "count_epsilon", "ema_decay"),
    Algorithm.NONPRIVATE: (*COMMON_KEYS, "lot_size", "ema_decay"),
    Algorithm.ANISO_DPSGD: (
        *COMMON_KEYS,
        *(k for k in PRIVATE_KEYS if k != "clipping"),
        "lot_size",
        *ANISO_KEYS,
        "ema_decay",
    ),
    Algorithm.EXPMECH_STUMPS: (*LEARNER_KEYS, "thresholds"),
    Algorithm.SQ_LAPLACE: (*LEARNER_KEYS, "epochs", "lr"),
    Algorithm.RWM_ONLINE: (*LEARNER_KEYS, "rounds", "thresholds"),
    Algorithm.RWM_LINEAR: (*LEARNER_KEYS, "rounds", "thresholds"),
}
LEARNER_REQUIRED = ("dataset", "algorithm", "seed", "delta", "target_epsilon")
REQUIRED_BY_ALGORITHM = {
    Algorithm.DPSGD: ("dataset", "model", "algorithm", "epochs", "lr", "seed", "delta", "clip_norm", "lot_size"),
    Algorithm.NOISY_GD: ("dataset", "model", "algorithm", "epochs", "lr", "seed", "delta", "clip_norm"),
    Algorithm.NONPRIVATE: ("dataset", "model", "algorithm", "epochs", "lr", "seed", "lot_size"),
    Algorithm.ANISO_DPSGD: ("dataset", "model", "algorithm", "epochs", "lr", "seed", "delta", "clip_norm", "lot_size"),
    Algorithm.EXPMECH_STUMPS: LEARNER_REQUIRED,
    Algorithm.SQ_LAPLACE: (*LEARNER_REQUIRED, "epochs", "lr"),
    Algorithm.RWM_ONLINE: LEARNER_REQUIRED,
    Algorithm.RWM_LINEAR: LEARNER_REQUIRED,
}
ALL_KEYS = tuple(dict.fromkeys(k for keys in KEYS_BY_ALGORITHM.values() for k in keys))

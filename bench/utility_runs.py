"""The utility suite's run definitions, as data: which spec each figure trains, where the setting
comes from, and the target it is checked against. `bench.utility` runs them.

A run either fixes its privacy by the spec (`target_epsilon`: σ is calibrated; `noise_multiplier`:
ε follows) or, with `max_epochs`, fixes σ and trains as many epochs as the ε budget `target_epsilon`
allows (the largest step count within the budget by the PLD or the RDP accountant, whichever allows
more), capped at `max_epochs` to bound the wall time. Every ε is the ledger's: up-front releases
(DP-PCA, noisy GD's count) included.
"""

from dataclasses import dataclass, field
from typing import Any

from engine.training import dataset_info
from engine.training.config.examples import digits_demo_spec

# Every tuned run's record carries this: choosing hyperparameters by test accuracy is itself a
# release of the private data that no ε here accounts for.
TUNING_CAVEAT = (
    "hyperparameters tuned on the test split (as the papers did); the tuning runs are releases not accounted for in ε"
)


@dataclass(frozen=True, kw_only=True)
class Run:
    name: str  # figure prefix: utility/<name>/...
    spec: dict[str, Any]  # a run spec; `epochs` is filled in when `max_epochs` is set
    source: str  # where the setting comes from
    target_accuracy: float | None = None  # checked: test accuracy ≥ this ...
    target_epsilon: float | None = None  # ... at ε ≤ this (with `max_epochs`: the budget to fill)
    max_epochs: float | None = None  # fill the ε budget with up to this many epochs (the time cap)
    quick: bool = False  # part of `--quick`
    quick_epochs: float | None = None  # with `quick`: train this many epochs instead (no target check)
    tuned: bool = False  # hyperparameters picked by looking at test accuracy
    slow: bool = False  # trained only with DPLAB_BENCH_SLOW=1 (hours on a CPU); otherwise only its ε is computed
    reported: dict[str, float] = field(default_factory=dict)  # the source's own figures, for comparison
    note: str = ""  # how this run differs from its source


# --- The digits demo and the single-dataset presets (each beside scikit-learn) -------------------------

DIGITS_DEMO_SPEC = digits_demo_spec()

ADULT_PRESET = {
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
}
IMAGE_LOGREG = {
    "model": "logreg",
    "algorithm": "dpsgd",
    "target_epsilon": 1.0,
    "delta": 1e-5,
    "clip_norm": 1.0,
    "lot_size": 512,
    "epochs": 5,
    "lr": 4.0,
    "seed": 0,
}

PRESETS = [
    Run(
        name="adult_logreg_eps1",
        spec=ADULT_PRESET,
        source="Near & Abuah's Adult setting (DP-SGD, logistic regression)",
        target_accuracy=0.84,
        target_epsilon=1.0,
        quick=True,
        tuned=True,
    ),
    Run(name="mnist_logreg_eps1", spec={"dataset": "mnist", **IMAGE_LOGREG}, source="pixels, logistic regression"),
    Run(
        name="fashion-mnist_logreg_eps1",
        spec={"dataset": "fashion-mnist", **IMAGE_LOGREG},
        source="pixels, logistic regression",
    ),
]

# --- Abadi et al. 2016 (CCS), §5.2, MNIST ------------------------------------------------------
# DP-PCA to 60 dimensions, 1,000 ReLU units, lots of 600, C = 4, lr 0.1 → 0.052 over 10 epochs.
# (σ_p, σ) = (16, 8), (7, 4), (4, 2) for ε = 0.5, 2, 8 at δ = 1e-5; the paper reports 90%, 95%, 97%.
# Epochs: as many as the budget allows, capped at 400 (40,000 steps: ~7–13 min at 1 thread on the
# development machine's 2 shared cores, measured at ~10–20 ms a step; the issue allows 15 min a run).

ABADI_MNIST_SPEC = {
    "dataset": "mnist",
    "model": "mlp",
    "hidden": [1000],
    "algorithm": "dpsgd",
    "pca_dims": 60,
    "delta": 1e-5,
    "clip_norm": 4.0,
    "lot_size": 600,
    "lr": 0.1,
    "lr_schedule": {"kind": "linear", "end_factor": 0.52, "epochs": 10},
    "seed": 0,
}
ABADI_MNIST_EPOCH_CAP = 400
ABADI_MNIST_SOURCE = "Abadi et al. 2016, §5.2 (their MNIST setting): DP-PCA 60, MLP 1000, L 600, C 4"

# These rows clip the whole gradient at C = 4 (flat), the reading behind docs/bench/utility.md's rows; the paper clips
# each layer at 4, which the reproduced table's rows follow (`bench.table_rows.ABADI_ROWS`).
ABADI_MNIST = [
    Run(
        name=f"abadi_mnist_pca60_mlp1000_eps{epsilon:g}",
        spec={**ABADI_MNIST_SPEC, "pca_noise": pca_noise, "noise_multiplier": sigma},
        source=ABADI_MNIST_SOURCE,
        target_accuracy=accuracy,
        target_epsilon=epsilon,
        max_epochs=ABADI_MNIST_EPOCH_CAP,
        quick=epsilon == 0.5,
        quick_epochs=3,
        reported={"accuracy": accuracy, "epsilon": epsilon},
    )
    for pca_noise, sigma, epsilon, accuracy in ((16.0, 8.0, 0.5, 0.90), (7.0, 4.0, 2.0, 0.95), (4.0, 2.0, 8.0, 0.97))
]

# --- Tuned runs: Tramèr & Boneh 2021 (ICLR), ScatterNet + linear -----------------------------------------
# Their MNIST / Fashion-MNIST settings: momentum 0.9, C = 0.1, lots of 8192 (MNIST: 4096), lr 16 (MNIST:
# 8); GroupNorm with 27 groups (their Fashion-MNIST choice; our features always use it). σ is calibrated
# here for the target ε over the epochs below. Starting from theirs, a few runs picked the epochs.

SCATTER_LINEAR = {
    "model": "logreg",
    "features": "scatternet",
    "algorithm": "dpsgd",
    "delta": 1e-5,
    "clip_norm": 0.1,
    "lot_size": 8192,
    "lr": 16.0,
    "optimizer": "momentum",
    "momentum": 0.9,
    "seed": 0,
}
SCATTER_SOURCE = "Tramèr & Boneh 2021: ScatterNet (J=2, 8 angles, GroupNorm 27) + linear, momentum 0.9, C 0.1"

TUNED = [
    Run(
        name="mnist_scatternet_logreg_eps1",
        spec={"dataset": "mnist", **SCATTER_LINEAR, "target_epsilon": 1.0, "epochs": 20},
        source=SCATTER_SOURCE,
        target_accuracy=0.96,
        target_epsilon=1.0,
        tuned=True,
    ),
    Run(
        name="mnist_scatternet_logreg_eps3",
        spec={"dataset": "mnist", **SCATTER_LINEAR, "target_epsilon": 3.0, "epochs": 40},
        source=SCATTER_SOURCE,
        target_accuracy=0.985,
        target_epsilon=3.0,
        tuned=True,
        reported={"accuracy": 0.987, "epsilon": 3.0},
    ),
    Run(
        name="fashion-mnist_scatternet_logreg_eps3",
        spec={"dataset": "fashion-mnist", **SCATTER_LINEAR, "target_epsilon": 3.0, "epochs": 40},
        source=SCATTER_SOURCE,
        target_accuracy=0.88,
        target_epsilon=3.0,
        tuned=True,
        reported={"accuracy": 0.897, "epsilon": 3.0},
    ),
]

# --- Near & Abuah, noisy gradient descent on Adult ---------------------------------------------
# Logistic regression with labels ±1, full batch, 30 iterations at lr 1 (larger rates diverge on these
# features), b = 3 (inputs have L2 norm ≤ 3.34), δ = 1e-5; a tenth of each budget goes to the noisy
# count. Where 30 iterations would need σ > 500 (ε = 0.01), σ = 500 and the budget sets the iterations.

NOISY_GD_SPEC = {
    "dataset": "adult",
    "model": "logreg",
    "algorithm": "noisy_gd",
    "clip_norm": 3.0,
    "epochs": 30,
    "lr": 1.0,
    "seed": 0,
    "delta": 1e-5,
}
NOISY_GD_EPSILONS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.0)
NOISY_GD_QUICK_EPSILONS = (0.1, 1.0)
COUNT_SHARE = 0.1  # of each ε, spent on the noisy example count
NOISY_GD_SOURCE = "Near & Abuah, Programming Differential Privacy, ch. Machine Learning"

NOISY_GD = [
    Run(
        name=f"adult_noisy_gd_{clipping}_clip_eps{epsilon:g}",
        spec={**NOISY_GD_SPEC, "clipping": clipping, "target_epsilon": epsilon, "count_epsilon": COUNT_SHARE * epsilon},
        source=NOISY_GD_SOURCE,
        target_epsilon=epsilon,
        quick=epsilon in NOISY_GD_QUICK_EPSILONS,
        tuned=True,
    )
    for clipping in ("gradient", "input")
    for epsilon in NOISY_GD_EPSILONS
]
# The non-private "hand GD" beside it: the same model family, lr and iterations, full batch, no noise.
HAND_GD = Run(
    name="adult_hand_gd_nonprivate",
    spec={
        "dataset": "adult",
        "model": "logreg",
        "algorithm": "nonprivate",
        "lot_size": dataset_info("adult").n_train,
        "epochs": NOISY_GD_SPEC["epochs"],
        "lr": NOISY_GD_SPEC["lr"],
        "seed": 0,
    },
    source="full-batch gradient descent, no clipping or noise",
    quick=True,
)

# --- Opacus's MNIST example (examples/mnist_README.md) ---------------------------------------------------
# Their SampleConvNet is our CNN's shape with ReLU (ours: tanh) on mean/std-normalized pixels (ours:
# pixels / 255); Poisson lots at q = 0.004 (L = 240), SGD without momentum. Their README reports
# ε = 1.16 / 2.91 / 6.86 (δ = 1e-5, Opacus's RDP accountant) and 94.63 / 96.78 / 97.09% (mean of 10 runs).
# On 2 CPU cores a CNN step at L = 240 takes ~0.1 s and an evaluation of the test split ~2.6 s: the first
# row (3,750 steps) trains in ~10 min, the others (11,250 and 15,000 steps) only with DPLAB_BENCH_SLOW=1.

OPACUS_SPEC = {"dataset": "mnist", "model": "cnn", "algorithm": "dpsgd", "delta": 1e-5, "lot_size": 240, "seed": 0}
OPACUS_SOURCE = "Opacus examples/mnist.py settings on our tanh CNN (their SampleConvNet uses ReLU)"

OPACUS = [
    Run(
        name=f"opacus_mnist_cnn_sigma{sigma:g}",
        spec={**OPACUS_SPEC, "noise_multiplier": sigma, "clip_norm": clip, "lr": lr, "epochs": epochs},
        source=OPACUS_SOURCE,
        slow=epochs > 15,
        reported={"accuracy": accuracy, "epsilon": epsilon},
    )
    for sigma, clip, lr, epochs, epsilon, accuracy in (
        (1.3, 1.5, 0.25, 15, 1.16, 0.9463),
        (1.1, 1.0, 0.15, 60, 2.91, 0.9678),
        (0.7, 1.5, 0.25, 45, 6.86, 0.9709),
    )
]

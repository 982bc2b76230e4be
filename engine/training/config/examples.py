"""Example run specs shared by the dashboard's presets, the worker's warm-up, the benchmarks and the tests.

The digits demo: DP-SGD (Abadi et al. 2016) trains logistic regression on scikit-learn's built-in 8×8
digits (1,797 images, no download) to ε = 3 at δ = 1e-5 in seconds on a CPU, the first thing a new user runs.

ScatterNet + CNN at ε = 3 (Tramèr & Boneh 2021; their ftramer/Handcrafted-DP settings "CNNs fine-tuned on
ScatterNet features": momentum 0.9, C 0.1; MNIST lots of 1024, lr 1, σ 1.35; Fashion-MNIST lots of 2048, lr 4,
σ 2.15), with De et al. 2022's moving average of the iterates (decay 0.999) and the epochs filling ε = 3 by the
tightest accountant (at most 60): the reproduced table's rows and the dashboard's presets.
"""

from typing import Any

DIGITS_DEMO = {
    "dataset": "digits",
    "model": "logreg",
    "algorithm": "dpsgd",
    "target_epsilon": 3.0,
    "delta": 1e-5,
    "clip_norm": 1.0,
    "lot_size": 64,
    "epochs": 20,
    "lr": 2.0,
    "seed": 0,
}


def digits_demo_spec(**changes: Any) -> dict[str, Any]:
    """A fresh copy of the digits demo's raw spec with `changes` applied."""
    return {**DIGITS_DEMO, **changes}


SCATTER_CNN = {
    "features": "scatternet",
    "model": "cnn",
    "algorithm": "dpsgd",
    "delta": 1e-5,
    "clip_norm": 0.1,
    "optimizer": "momentum",  # the engine's default momentum, 0.9: theirs
    "target_epsilon": 3.0,
    "fill_budget": True,
    "epochs": 60,
    "ema_decay": 0.999,
}
SCATTER_CNN_SETTINGS = {  # Tramèr & Boneh's lot size, learning rate and σ for each dataset
    "mnist": {"lot_size": 1024, "lr": 1.0, "noise_multiplier": 1.35},
    "fashion-mnist": {"lot_size": 2048, "lr": 4.0, "noise_multiplier": 2.15},
}


def scatternet_cnn_spec(dataset: str, **changes: Any) -> dict[str, Any]:
    """The ScatterNet + CNN recipe's raw spec on `dataset` ("mnist" or "fashion-mnist"), without a seed unless
    `changes` gives one."""
    return {"dataset": dataset, **SCATTER_CNN, **SCATTER_CNN_SETTINGS[dataset], **changes}

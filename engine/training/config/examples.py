"""Example run specs shared by the dashboard's presets, the worker's warm-up, the benchmarks and the tests.

The digits demo: DP-SGD (Abadi et al. 2016) trains logistic regression on scikit-learn's built-in 8×8
digits (1,797 images, no download) to ε = 3 at δ = 1e-5 in seconds on a CPU, the first thing a new user runs.
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

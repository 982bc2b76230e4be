"""Search suite: the tuned rows of docs/bench/utility.md (marked *) rerun as private hyperparameter searches, the search
charged (Papernot & Steinke 2022; `engine.jobs.search`).

Each row keeps its published setting's data, model, lot size and epochs and searches a small grid of ε-invariant
hyperparameters around it (learning rate and clipping norm: every configuration has the same ledger). The number
of trials is truncated negative binomial (η = 0.5) with mean `mean`; the trials' σ is the smallest for which
releasing the best trial costs at most the row's target ε (bisection on the search's ε). K is drawn from OS
randomness, every trial trains, and the best by test accuracy is reported with the search's ε: the figure a user
may quote, tuning included. Beside it, the row's uncharged figure from the utility suite (one run at the target ε,
its hyperparameters picked by looking at test accuracy). ScatterNet rows need MNIST / Fashion-MNIST's files
(`DPLAB_DATA_DIR`) and compute the features once (minutes); `--quick` runs the Adult row only.
"""

import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.utility_runs import ADULT_PRESET, SCATTER_LINEAR
from engine.jobs.options import split_job_options
from engine.jobs.release import RunToRelease, planned, release_delta
from engine.jobs.settings import default_data_dirs
from engine.jobs.sweep import expand_sweep, grid_configurations, privacy_of_sweep, sweep_search
from engine.privacy.selection import search_epsilon
from engine.training import DATASETS, load_dataset, parse_spec, train

DISTRIBUTION = {"distribution": "negative_binomial", "shape": 0.5}


@dataclass(frozen=True, kw_only=True)
class SearchRow:
    name: str
    base: dict[str, Any]  # the row's spec without its privacy setting (σ is calibrated here)
    grid: dict[str, list]
    target_epsilon: float
    mean: float
    uncharged: float | None  # docs/bench/utility.md's figure: hyperparameters picked on the test split
    quick: bool = False


def without_privacy(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in ("target_epsilon", "noise_multiplier", "seed")}


ROWS = [
    SearchRow(
        name="adult_logreg_eps1",
        base=without_privacy(ADULT_PRESET),
        grid={"lr": [0.5, 1.0, 2.0], "clip_norm": [0.5, 1.0]},
        target_epsilon=1.0,
        mean=6.0,
        uncharged=0.844,
        quick=True,
    ),
    SearchRow(
        name="adult_mlp_eps1",  # not a utility-table row: the model that came closest to 85% on Adult
        base={
            "dataset": "adult",
            "model": "mlp",
            "hidden": [64],
            "algorithm": "dpsgd",
            "delta": 1e-6,
            "lot_size": 1024,
            "epochs": 10,
        },
        grid={"lr": [1.0, 2.0, 4.0], "clip_norm": [0.5, 1.0]},
        target_epsilon=1.0,
        mean=6.0,
        uncharged=None,
        quick=True,
    ),
    SearchRow(
        name="mnist_scatternet_logreg_eps1",
        base=without_privacy({"dataset": "mnist", **SCATTER_LINEAR, "epochs": 20}),
        grid={"lr": [8.0, 16.0], "clip_norm": [0.05, 0.1]},
        target_epsilon=1.0,
        mean=3.0,
        uncharged=0.982,
    ),
    SearchRow(
        name="mnist_scatternet_logreg_eps3",
        base=without_privacy({"dataset": "mnist", **SCATTER_LINEAR, "epochs": 40}),
        grid={"lr": [8.0, 16.0], "clip_norm": [0.05, 0.1]},
        target_epsilon=3.0,
        mean=3.0,
        uncharged=0.987,
    ),
    SearchRow(
        name="fashion-mnist_scatternet_logreg_eps3",
        base=without_privacy({"dataset": "fashion-mnist", **SCATTER_LINEAR, "epochs": 40}),
        grid={"lr": [8.0, 16.0], "clip_norm": [0.05, 0.1]},
        target_epsilon=3.0,
        mean=3.0,
        uncharged=0.899,
    ),
]


def grid_spec(row: SearchRow, sigma: float) -> dict[str, Any]:
    return {
        "base": row.base | {"noise_multiplier": sigma},
        "grid": row.grid,
        "search": DISTRIBUTION | {"mean": row.mean},
    }


def search_cost(row: SearchRow, sigma: float) -> float:
    """The private search's ε at σ, as `privacy_of_sweep` states it, without the fixed grid's composition that it
    also works out (a PLD composition of every configuration: most of its time)."""
    raw = grid_spec(row, sigma)
    specs = [split_job_options(point.spec)[0] for point in grid_configurations(raw)]
    delta = release_delta([RunToRelease(spec=spec) for spec in specs])
    return search_epsilon([planned(spec).ledger() for spec in specs], sweep_search(raw), delta=delta).epsilon


def calibrate(row: SearchRow) -> tuple[float, Any]:
    """The smallest σ (to 0.1%) whose search costs at most the target ε, with that search's privacy
    (`privacy_of_sweep`'s, checked against the target)."""
    low, high = 0.3, 50.0
    while high / low > 1.001:
        middle = (low * high) ** 0.5
        low, high = (middle, high) if search_cost(row, middle) > row.target_epsilon else (low, middle)
    privacy = privacy_of_sweep(grid_spec(row, high))
    if privacy.search.epsilon > row.target_epsilon:
        raise AssertionError(f"{row.name}: σ {high} costs ε {privacy.search.epsilon}, over {row.target_epsilon}")
    return high, privacy


def run(quick: bool = False, rows: list[SearchRow] | None = None) -> list[dict]:
    records = []
    for row in ROWS if rows is None else rows:
        if quick and not row.quick:
            continue
        dataset_name = row.base["dataset"]
        if DATASETS[dataset_name].missing_files(default_data_dirs()):
            print(f"skipping {row.name}: no {dataset_name} files here (DPLAB_DATA_DIR)", file=sys.stderr)
            continue
        sigma, privacy = calibrate(row)
        dirs = default_data_dirs()  # the last is the data home's, where ScatterNet features are cached once
        dataset = load_dataset(dataset_name, dirs)
        trials = expand_sweep(grid_spec(row, sigma))
        started = time.perf_counter()
        results = [(point.values, train(parse_spec(point.spec), data_dirs=dirs, dataset=dataset)) for point in trials]
        seconds = time.perf_counter() - started
        best_values, best = max(results, key=lambda pair: pair[1].test_accuracy) if results else ({}, None)
        accuracy = best.test_accuracy if best is not None else float("nan")
        print(
            f"  {row.name}: {len(trials)} trials at σ = {sigma:.3f} (each ε = "
            f"{best.epsilon if best else float('nan'):.3f}); best {accuracy:.4f} {best_values} at search ε = "
            f"{privacy.search.epsilon:.3f} (δ {privacy.search.delta:.2g}); uncharged {row.uncharged}; {seconds:.0f} s",
            file=sys.stderr,
        )
        records.append(
            {
                "name": f"search/{row.name}/test_accuracy",
                "value": accuracy,
                "unit": "accuracy",
                "search_epsilon": privacy.search.epsilon,
                "search_delta": privacy.search.delta,
                "trials": len(trials),
                "mean_trials": row.mean,
                "distribution": DISTRIBUTION,
                "grid": row.grid,
                "noise_multiplier": sigma,
                "trial_epsilon": best.epsilon if best else None,
                "best": best_values,
                "trial_accuracies": [r.test_accuracy for _, r in results],
                "uncharged_accuracy": row.uncharged,
                "fixed_grid_epsilon": privacy.composition_epsilon,
                "seconds": seconds,
                "compared": f"search-charged ε {privacy.search.epsilon:.2f}; uncharged {row.uncharged or '–'}",
            }
        )
    return records

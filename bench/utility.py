"""Utility suite: test accuracy against ε, each figure with the ε of its privacy ledger (the tightest
accountant's, up-front releases included) and its wall time. The runs are data (`bench.utility_runs`):

- the digits demo (digits, logistic regression, ε = 3, median of 5 seeds) and the single-dataset
  presets (Adult, MNIST, Fashion-MNIST logistic regression), each beside scikit-learn's non-private
  logistic regression on the same split (the price of privacy);
- Abadi et al. 2016's MNIST table (DP-PCA 60 + MLP 1000; ε = 0.5 / 2 / 8), each row trained
  for as many epochs as its budget allows (capped to bound the wall time);
- tuned runs: Tramèr & Boneh 2021's ScatterNet + linear on MNIST (ε = 1, 3) and Fashion-MNIST (ε = 3);
- noisy gradient descent on Adult at ε from 0.01 to 2 (gradient and input clipping) beside
  the non-private full-batch "hand GD" and scikit-learn;
- Opacus's MNIST example settings on our CNN.

A run with a target adds a `met_target_…` figure (1 = the accuracy target is met within the ε
budget). Tuned runs carry a caveat: their hyperparameters were chosen by test accuracy, a release no
ε here accounts for. Runs that need a dataset copy are skipped with a message when none is found
(`DPLAB_DATA_DIR`). `--quick` keeps digits (1 seed), the Adult runs and a 3-epoch seed-003 row.
The first ScatterNet run computes the features of 70,000 images (minutes on a CPU) and caches them
in the data home. On a 2-core machine `--threads 1` is usually faster than torch's default.
"""

import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.utility_runs import (
    ABADI_MNIST,
    DIGITS_DEMO_SPEC,
    HAND_GD,
    NOISY_GD,
    OPACUS,
    PRESETS,
    TUNED,
    TUNING_CAVEAT,
    Run,
)
from engine.jobs.settings import default_data_dirs
from engine.privacy import SIGMA_MAX, UnreachableTargetError, fill_steps, panel
from engine.training import (
    Dataset,
    DatasetError,
    TrainingPlan,
    TrainResult,
    dataset_info,
    load_dataset,
    parse_spec,
    plan_run,
)
from engine.training import train as train_spec
from engine.training.algorithms.baselines import sklearn_logistic_regression

SECTIONS: list[tuple[str, list[Run]]] = [
    ("presets", PRESETS),
    ("Abadi et al. 2016's MNIST setting", ABADI_MNIST),
    ("tuned (Tramèr & Boneh 2021)", TUNED),
    ("noisy GD (Near & Abuah)", [*NOISY_GD, HAND_GD]),
    ("Opacus MNIST example", OPACUS),
]
BASELINE_DATASETS = ("adult", "mnist", "fashion-mnist")  # scikit-learn's non-private logistic regression
MAX_SPEC_EPOCHS = 1000  # the spec's upper bound: how far a budget is searched
SLOW = os.environ.get("DPLAB_BENCH_SLOW") == "1"  # also train the runs marked slow, and lift time caps (hours on a CPU)


@dataclass(frozen=True, kw_only=True)
class Budget:
    """The epochs a run trains when it fills an ε budget."""

    epochs: float  # trained: min(within budget, cap)
    epochs_within_budget: float  # the most the budget allows (up to MAX_SPEC_EPOCHS)
    accountant: str  # the accountant that allowed them
    capped: bool  # the time cap, not the budget, set the epochs

    def fields(self) -> dict[str, Any]:
        return {
            "epochs_within_budget": self.epochs_within_budget,
            "budget_accountant": self.accountant,
            "epochs_capped": self.capped,
        }


class Datasets:
    """Each dataset loaded once per suite run; None (with a message) when no copy is found."""

    def __init__(self) -> None:
        self.dirs = default_data_dirs()
        self.loaded: dict[str, Dataset | None] = {}

    def get(self, name: str) -> Dataset | None:
        if name not in self.loaded:
            try:
                self.loaded[name] = load_dataset(name, self.dirs)
            except DatasetError as exc:
                print(f"bench: runs on {name} skipped ({exc})", file=sys.stderr)
                self.loaded[name] = None
        return self.loaded[name]


def run(quick: bool = False) -> list[dict]:
    datasets = Datasets()
    records = digits(quick)
    records += baselines(datasets, BASELINE_DATASETS[:1] if quick else BASELINE_DATASETS)
    for _, runs in SECTIONS:
        for item in runs:
            if quick and not item.quick:
                continue
            records += measure(item, datasets, quick=quick) if SLOW or not item.slow else epsilon_only(item)
    print(summary_table(records), file=sys.stderr)
    return records


# --- One run -------------------------------------------------------------------------------------------


def measure(item: Run, datasets: Datasets, *, quick: bool) -> list[dict]:
    data = datasets.get(item.spec["dataset"])
    if data is None:
        return []
    shortened = quick and item.quick_epochs is not None
    started = time.perf_counter()
    spec, plan, budget = resolve(item, n_train=len(data.x_train), quick=quick)
    planning_s = time.perf_counter() - started
    result = train_spec(parse_spec(spec), data_dirs=datasets.dirs, dataset=data, plan=plan)
    return run_records(item, spec, result, budget=budget, planning_s=planning_s, check_target=not shortened)


def epsilon_only(item: Run) -> list[dict]:
    """A slow run's ε at its settings, from its ledger alone (the dataset's public size; nothing trained)."""
    plan = plan_run(parse_spec(item.spec), n_train=dataset_info(item.spec["dataset"]).n_train)
    accounts = panel(plan.ledger(), delta=plan.delta)
    accountant, epsilon = accounts.tightest()
    print(f"bench: {item.name} not trained (DPLAB_BENCH_SLOW=1 trains it); its ε only", file=sys.stderr)
    return [
        {
            "name": f"utility/{item.name}/epsilon_{accountant}",
            "value": epsilon,
            "unit": "ε",
            "trained": False,
            "accountant": accountant,
            "epsilons": accounts.final(),
            "epochs": item.spec["epochs"],
            "steps": plan.steps,
            "source": item.source,
            "reported": item.reported,
            "spec": item.spec,
        }
    ]


def resolve(item: Run, *, n_train: int, quick: bool) -> tuple[dict, TrainingPlan, Budget | None]:
    """The spec as trained (epochs filled in), its plan, and the budget that set its epochs if any."""
    if quick and item.quick_epochs is not None:
        spec = {**item.spec, "epochs": item.quick_epochs}
        return spec, plan_run(parse_spec(spec), n_train=n_train), None
    if item.max_epochs is not None:  # a time cap; DPLAB_BENCH_SLOW=1 trains the whole budget (to the spec's bound)
        cap = MAX_SPEC_EPOCHS if SLOW else item.max_epochs
        return fill(item.spec, target_epsilon=item.target_epsilon, max_epochs=cap, n_train=n_train)
    try:
        return item.spec, plan_run(parse_spec(item.spec), n_train=n_train), None
    except UnreachableTargetError:
        # σ would exceed its ceiling: train at the ceiling for as many epochs as the budget allows
        spec = {k: v for k, v in item.spec.items() if k != "target_epsilon"} | {"noise_multiplier": SIGMA_MAX}
        return fill(spec, target_epsilon=item.spec["target_epsilon"], max_epochs=item.spec["epochs"], n_train=n_train)


def fill(spec: dict, *, target_epsilon: float, max_epochs: float, n_train: int) -> tuple[dict, TrainingPlan, Budget]:
    """Epochs for a fixed-σ spec: the largest step count with ε ≤ target by the PLD or RDP accountant
    (whichever allows more: the engine's `fill_steps`, the rule of a `fill_budget` run), capped at `max_epochs`."""
    ceiling = plan_run(parse_spec({**spec, "epochs": MAX_SPEC_EPOCHS}), n_train=n_train)
    within, accountant = fill_steps(
        ceiling.ledger, target_epsilon=target_epsilon, delta=ceiling.delta, limit=ceiling.steps
    )
    cap = plan_run(parse_spec({**spec, "epochs": max_epochs}), n_train=n_train).steps
    trained = min(within, cap)
    epochs = trained * ceiling.lot_size / n_train
    filled = {**spec, "epochs": epochs}
    plan = plan_run(parse_spec(filled), n_train=n_train)
    if plan.steps != trained:
        raise AssertionError(f"{epochs} epochs plan {plan.steps} steps, not {trained}")
    budget = Budget(
        epochs=epochs,
        epochs_within_budget=within * ceiling.lot_size / n_train,
        accountant=accountant,
        capped=within > cap,
    )
    return filled, plan, budget


# --- Records ---------------------------------------------------------------------------------------------


def run_records(
    item: Run, spec: dict, result: TrainResult, *, budget: Budget | None, planning_s: float, check_target: bool
) -> list[dict]:
    prefix = f"utility/{item.name}"
    fields: dict[str, Any] = {
        "epsilon": result.epsilon,
        "accountant": result.accountant,
        "epsilons": result.epsilons,
        "delta": result.delta,
        "noise_multiplier": result.noise_multiplier,
        "epochs": spec["epochs"],
        "steps": result.steps,
        "seconds": result.seconds,
        "planning_seconds": planning_s,
        "source": item.source,
        "spec": spec,
    }
    if budget is not None:
        fields |= budget.fields()
    if item.reported:
        fields["reported"] = item.reported
    if item.note:
        fields["note"] = item.note
    if item.tuned:
        fields["caveat"] = TUNING_CAVEAT
    met = target_met(item, result) if check_target else None
    if met is not None:
        fields |= {"target_accuracy": item.target_accuracy, "target_epsilon": item.target_epsilon, "target_met": met}
    records = [{"name": f"{prefix}/test_accuracy", "value": result.test_accuracy, "unit": "accuracy", **fields}]
    if result.epsilon is not None:
        records.append({"name": f"{prefix}/epsilon_{result.accountant}", "value": result.epsilon, "unit": "ε"})
    records += [
        {"name": f"{prefix}/epochs", "value": float(spec["epochs"]), "unit": "epochs", "steps": result.steps},
        {"name": f"{prefix}/seconds", "value": result.seconds, "unit": "s"},
    ]
    if met is not None:
        name = f"{prefix}/met_target_accuracy_{item.target_accuracy:g}_at_epsilon_{item.target_epsilon:g}"
        records.append({"name": name, "value": float(met), "unit": "1 = yes"})
    return records


def target_met(item: Run, result: TrainResult) -> bool | None:
    """Whether the run reached its accuracy target within its ε budget (None: it has no target)."""
    if item.target_accuracy is None:
        return None
    within = item.target_epsilon is None or (result.epsilon is not None and result.epsilon <= item.target_epsilon)
    return bool(result.test_accuracy >= item.target_accuracy and within)


def baselines(datasets: Datasets, names: tuple[str, ...]) -> list[dict]:
    records = []
    for name in names:
        data = datasets.get(name)
        if data is None:
            continue
        started = time.perf_counter()
        baseline = sklearn_logistic_regression(data)
        records.append(
            {
                "name": f"utility/{name}/sklearn_nonprivate_accuracy",
                "value": baseline.test_accuracy,
                "unit": "accuracy",
                "majority_class_accuracy": baseline.majority_class_accuracy,
                "seconds": time.perf_counter() - started,
            }
        )
    return records


def digits(quick: bool) -> list[dict]:
    data = load_dataset("digits")
    seeds = range(1 if quick else 5)
    results = [train_spec(parse_spec({**DIGITS_DEMO_SPEC, "seed": seed}), dataset=data) for seed in seeds]
    baseline = sklearn_logistic_regression(data).test_accuracy
    accuracy = statistics.median(r.test_accuracy for r in results)
    return [
        {
            "name": "utility/digits_logreg_eps3/test_accuracy",
            "value": accuracy,
            "unit": "accuracy",
            "seeds": len(results),
        },
        {"name": "utility/digits_logreg_eps3/epsilon", "value": max(r.epsilon for r in results), "unit": "ε"},
        {
            "name": "utility/digits_logreg_eps3/seconds",
            "value": statistics.median(r.seconds for r in results),
            "unit": "s",
        },
        {"name": "utility/digits_logreg/sklearn_nonprivate_accuracy", "value": baseline, "unit": "accuracy"},
    ]


# --- The summary a person reads ----------------------------------------------------------------------------


def summary_table(records: list[dict]) -> str:
    """One line per run: accuracy, ε (accountant), epochs, seconds, target and whether it was met."""
    lines = [
        "utility runs (* hyperparameters tuned on the test split, as the papers did; not accounted for in ε):",
        "| run | accuracy | ε (accountant) | epochs | s | target | met |",
        "|---|---:|---|---:|---:|---|---|",
    ]
    for r in records:
        if r.get("trained") is False:
            run_name = r["name"].removeprefix("utility/").rsplit("/", 1)[0]
            epsilon = f"{r['value']:.3f} ({r['accountant']})"
            lines.append(f"| {run_name} | not trained | {epsilon} | {r['epochs']:.4g} | | | |")
            continue
        if not (r["name"].endswith("/test_accuracy") and "seconds" in r):
            continue
        run_name = r["name"].removeprefix("utility/").removesuffix("/test_accuracy") + ("*" if "caveat" in r else "")
        epsilon = "∞ (non-private)" if r["epsilon"] is None else f"{r['epsilon']:.3f} ({r['accountant']})"
        epochs = f"{r['epochs']:.4g}" + (" (capped)" if r.get("epochs_capped") else "")
        target = f"≥ {r['target_accuracy']:g} at ε ≤ {r['target_epsilon']:g}" if "target_met" in r else ""
        met = {True: "yes", False: "no"}.get(r.get("target_met"), "")
        cells = (run_name, f"{r['value']:.4f}", epsilon, epochs, f"{r['seconds']:.1f}", target, met)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

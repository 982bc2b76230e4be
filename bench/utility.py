"""Utility suite: the acceptance run (digits, logistic regression, ε = 3), seed 000's Adult logistic
regression and MNIST / Fashion-MNIST logistic regression (target ε = 1), each beside scikit-learn's
non-private logistic regression on the same split (the price of privacy). Runs that need a dataset
copy are measured when one is found (`DPLAB_DATA_DIR`); `--quick` runs Adult only."""

import statistics
import sys

from sklearn.linear_model import LogisticRegression

from engine.jobs import default_data_dirs
from engine.training import DatasetError, load_dataset, parse_spec, train

ACCEPTANCE_SPEC = {
    "dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3.0, "delta": 1e-5,
    "clip_norm": 1.0, "lot_size": 64, "epochs": 20, "lr": 2.0, "seed": 0,
}  # fmt: skip


# Runs that need a dataset copy (`DPLAB_DATA_DIR`): (figure prefix, spec), each beside scikit-learn.
DATA_RUNS = [
    ("adult_logreg_eps1", {
        "dataset": "adult", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 1.0, "delta": 1e-6,
        "clip_norm": 1.0, "lot_size": 256, "epochs": 5, "lr": 1.0, "seed": 0,
    }),
    ("mnist_logreg_eps1", {
        "dataset": "mnist", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 1.0, "delta": 1e-5,
        "clip_norm": 1.0, "lot_size": 512, "epochs": 5, "lr": 4.0, "seed": 0,
    }),
    ("fashion-mnist_logreg_eps1", {
        "dataset": "fashion-mnist", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 1.0, "delta": 1e-5,
        "clip_norm": 1.0, "lot_size": 512, "epochs": 5, "lr": 4.0, "seed": 0,
    }),
]  # fmt: skip


def run(quick: bool = False) -> list[dict]:
    records = digits(quick)
    for prefix, spec in DATA_RUNS[:1] if quick else DATA_RUNS:
        records += with_data(prefix, spec)
    return records


def with_data(prefix: str, spec: dict) -> list[dict]:
    try:
        data = load_dataset(spec["dataset"], default_data_dirs())
    except DatasetError as exc:
        print(f"bench: {prefix} skipped ({exc})", file=sys.stderr)
        return []
    result = train(parse_spec(spec), dataset=data)
    baseline = LogisticRegression(max_iter=1000).fit(data.x_train, data.y_train).score(data.x_test, data.y_test)
    return [
        {"name": f"utility/{prefix}/test_accuracy", "value": result.test_accuracy, "unit": "accuracy"},
        {"name": f"utility/{prefix}/epsilon_{result.accountant}", "value": result.epsilon, "unit": "ε"},
        {"name": f"utility/{prefix}/seconds", "value": result.seconds, "unit": "s"},
        {"name": f"utility/{spec['dataset']}/sklearn_nonprivate_accuracy", "value": baseline, "unit": "accuracy"},
    ]


def digits(quick: bool) -> list[dict]:
    data = load_dataset("digits")
    seeds = range(1 if quick else 5)
    results = [train(parse_spec({**ACCEPTANCE_SPEC, "seed": seed}), dataset=data) for seed in seeds]
    baseline = LogisticRegression(max_iter=2000).fit(data.x_train, data.y_train).score(data.x_test, data.y_test)
    accuracy = statistics.median(r.test_accuracy for r in results)
    return [
        {"name": "utility/digits_logreg_eps3/test_accuracy", "value": accuracy, "unit": "accuracy",
         "seeds": len(results)},
        {"name": "utility/digits_logreg_eps3/epsilon", "value": max(r.epsilon for r in results), "unit": "ε"},
        {"name": "utility/digits_logreg_eps3/seconds", "value": statistics.median(r.seconds for r in results),
         "unit": "s"},
        {"name": "utility/digits_logreg/sklearn_nonprivate_accuracy", "value": baseline, "unit": "accuracy"},
    ]  # fmt: skip

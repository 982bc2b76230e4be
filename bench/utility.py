"""Utility suite: the issue's acceptance run (digits, logistic regression, ε = 3) and seed 000's
Adult logistic regression (ε = 1), each beside scikit-learn's non-private logistic regression on the
same split (the price of privacy). Adult is measured when a copy is found (`DPLAB_DATA_DIR`)."""

import statistics
import sys

from sklearn.linear_model import LogisticRegression

from engine.jobs import default_data_dirs
from engine.training import DatasetError, load_dataset, parse_spec, train

ACCEPTANCE_SPEC = {
    "dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3.0, "delta": 1e-5,
    "clip_norm": 1.0, "lot_size": 64, "epochs": 20, "lr": 2.0, "seed": 0,
}  # fmt: skip


ADULT_SPEC = {
    "dataset": "adult", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 1.0, "delta": 1e-6,
    "clip_norm": 1.0, "lot_size": 256, "epochs": 5, "lr": 1.0, "seed": 0,
}  # fmt: skip


def run(quick: bool = False) -> list[dict]:
    return digits(quick) + adult(quick)


def adult(quick: bool) -> list[dict]:
    try:
        data = load_dataset("adult", default_data_dirs())
    except DatasetError as exc:
        print(f"bench: Adult figures skipped ({exc})", file=sys.stderr)
        return []
    result = train(parse_spec(ADULT_SPEC), dataset=data)
    baseline = LogisticRegression(max_iter=3000).fit(data.x_train, data.y_train).score(data.x_test, data.y_test)
    return [
        {"name": "utility/adult_logreg_eps1/test_accuracy", "value": result.test_accuracy, "unit": "accuracy"},
        {"name": "utility/adult_logreg_eps1/epsilon", "value": result.epsilon, "unit": "ε"},
        {"name": "utility/adult_logreg_eps1/seconds", "value": result.seconds, "unit": "s"},
        {"name": "utility/adult_logreg/sklearn_nonprivate_accuracy", "value": baseline, "unit": "accuracy"},
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

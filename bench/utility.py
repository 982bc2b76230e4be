"""Utility suite: the issue's acceptance run (digits, logistic regression, ε = 3) end to end, beside
scikit-learn's non-private logistic regression on the same split (the price of privacy)."""

import statistics

from sklearn.linear_model import LogisticRegression

from engine.training import load_dataset, parse_spec, train

ACCEPTANCE_SPEC = {
    "dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3.0, "delta": 1e-5,
    "clip_norm": 1.0, "lot_size": 64, "epochs": 20, "lr": 2.0, "seed": 0,
}  # fmt: skip


def run(quick: bool = False) -> list[dict]:
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

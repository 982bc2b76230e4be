"""scikit-learn's non-private logistic regression on the same features and split as the engine: the
reference line of every tabular privacy–utility plot."""

from dataclasses import dataclass

import numpy as np

from engine.training.datasets import Dataset

MAX_ITER = 1000


@dataclass(frozen=True, kw_only=True)
class BaselineResult:
    name: str
    test_accuracy: float
    majority_class_accuracy: float


def sklearn_logistic_regression(data: Dataset, *, c: float = 1.0) -> BaselineResult:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, max_iter=MAX_ITER)
    model.fit(data.x_train, data.y_train)
    accuracy = float(model.score(data.x_test, data.y_test))
    majority = np.bincount(data.y_train, minlength=data.n_classes).argmax()
    return BaselineResult(
        name="sklearn LogisticRegression",
        test_accuracy=accuracy,
        majority_class_accuracy=float(np.mean(data.y_test == majority)),
    )

"""Logistic regression learned from Laplace-noised statistical queries (Dwork & Roth 2014, ch. 11, §11.1;
Blum, Dwork, McSherry, Nissim 2005: an SQ learner made private by answering its queries with the Laplace
mechanism).

Mechanism: θ ∈ R^{d+1} (a weight per feature and a bias; x̃ = [x, 1]) starts at 0. Each of the T = plan.steps
iterations asks exactly q = d + 1 statistical queries, one per coordinate j:

    φ_j(x, y) = (clip((σ(θ·x̃) − y)·x̃_j, −1, 1) + 1) / 2 ∈ [0, 1],

each answered once by `LaplaceSumOracle`: a_j = Σ_n φ_j(x_n, y_n) + Laplace(b). A sum of values in [0, 1] has
sensitivity 1, so each answer is (1/b)-DP (D&R Thm 3.6); with b = 1/ε_q and ε_q = ε/(T·q) the T·q answers
compose to ε (D&R Thm 3.16). That is the ledger of the plan: T steps of q Laplace releases of scale b (`budget`).
The gradient estimate is g_j = 2·a_j/N − 1, N the public training-set size, and θ ← θ − lr·g.

The gradient coordinate (σ(θ·x̃) − y)·x̃_j already lies in (−1, 1), since σ − y ∈ (−1, 1) and every feature (and
the bias input 1) lies in [0, 1]: the clip never binds for the logistic loss. It is kept as the query's contract,
which the privacy argument needs whatever the features are.

Records: step t holds θ after t updates: test accuracy and test log-loss; train_loss and train_accuracy (private
diagnostics) are the noiseless training loss and accuracy of the θ the iteration queried at.
"""

import time

import numpy as np

from engine.training.algorithms.learners.outcome import (
    LearnerOutcome,
    Report,
    ShouldStop,
    check_data,
    learner_rng,
    parameter,
    stopped,
)
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset

SQ_STREAM = 4002  # the learner's constant in its random stream


class LaplaceSumOracle:
    """Answers statistical queries: the sum over the training set of φ ∈ [0, 1], plus Laplace noise of scale b.
    Counts the queries it answers (each column of a call is one query, answered once)."""

    def __init__(self, scale: float, rng: np.random.Generator):
        self.scale, self.rng = scale, rng
        self.queries_per_call: list[int] = []

    @property
    def queries(self) -> int:
        return sum(self.queries_per_call)

    def answer(self, values: np.ndarray) -> np.ndarray:
        """values (N, q): query c's φ on each example; returns the q noisy sums."""
        if values.ndim != 2 or (values.size and not (values.min() >= 0.0 and values.max() <= 1.0)):
            raise ValueError("a statistical query maps each example into [0, 1]")
        self.queries_per_call.append(values.shape[1])
        return values.sum(axis=0) + self.rng.laplace(0.0, self.scale, size=values.shape[1])


def with_bias(x: np.ndarray) -> np.ndarray:
    """x̃ = [x, 1] in float64."""
    return np.hstack([np.asarray(x, dtype=np.float64), np.ones((len(x), 1))])


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def gradient_queries(theta: np.ndarray, x1: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(N, d + 1): φ_j(x_n, y_n) of every coordinate's query at θ."""
    residual = sigmoid(x1 @ theta) - y
    return (np.clip(residual[:, None] * x1, -1.0, 1.0) + 1.0) / 2.0


def sq_update(
    theta: np.ndarray, x1: np.ndarray, y: np.ndarray, *, oracle: LaplaceSumOracle, n_public: int, lr: float
) -> np.ndarray:
    """One iteration: q noisy statistical queries, their answers mapped back to a gradient estimate, one step."""
    answers = oracle.answer(gradient_queries(theta, x1, y))
    return theta - lr * (2.0 * answers / n_public - 1.0)


def accuracy_and_log_loss(theta: np.ndarray, x1: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    z = x1 @ theta
    log_loss = np.logaddexp(0.0, z) - y * z  # −[y ln σ(z) + (1 − y) ln(1 − σ(z))], stable
    return float(np.mean((z > 0) == (y == 1))), float(np.mean(log_loss))


def train_sq(
    spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: ShouldStop, report: Report
) -> LearnerOutcome:
    check_data(plan, len(data.y_train))
    x1, y = with_bias(data.x_train), data.y_train.astype(np.float64)
    x1_test, y_test = with_bias(data.x_test), data.y_test.astype(np.float64)
    queries = int(parameter(plan, "queries_per_iteration"))
    if x1.shape[1] != queries:
        raise ValueError(
            f"the plan charges {queries} queries per iteration, but the data has {x1.shape[1] - 1} features (+1 bias)"
        )
    oracle = LaplaceSumOracle(parameter(plan, "laplace_scale"), learner_rng(spec, SQ_STREAM))
    theta = np.zeros(queries)
    accuracy, loss = accuracy_and_log_loss(theta, x1_test, y_test)
    report(0, test_accuracy=accuracy, test_loss=loss)
    started, steps = time.perf_counter(), 0
    for step in range(1, plan.steps + 1):
        if stopped(should_stop):
            break
        train_accuracy, train_loss = accuracy_and_log_loss(theta, x1, y)
        theta = sq_update(theta, x1, y, oracle=oracle, n_public=plan.n_train, lr=spec.lr)
        accuracy, loss = accuracy_and_log_loss(theta, x1_test, y_test)
        steps = step
        report(
            step,
            test_accuracy=accuracy,
            test_loss=loss,
            train_loss=train_loss,
            train_accuracy=train_accuracy,
            elapsed_s=time.perf_counter() - started,
        )
    return LearnerOutcome(test_accuracy=accuracy, test_loss=loss, steps=steps)

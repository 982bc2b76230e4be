"""Private PAC learning with the exponential mechanism over decision stumps (seed 004: Dwork & Roth ch. 11,
§11.1; Kasiviswanathan, Lee, Nissim, Raskhodnikova, Smith 2008).

Mechanism: the class H is the stumps of `stumps.py` (|H| = 2·d·K, fixed by public numbers). The score of h is
−(number of training examples h misclassifies): adding or removing one example changes it by at most 1
(sensitivity Δ = 1). One h is drawn with probability ∝ exp(ε·score(h)/(2Δ)), the exponential mechanism of
D&R Def. 3.4, ε-DP by D&R Thm 3.10: exactly the single pure-ε release the plan's ledger holds. The draw is the
Gumbel-max trick (argmax of ε·score/2 + independent Gumbel noise), an exact sample of that softmax that never
exponentiates a score.

Utility (D&R Thm 3.11): Pr[score(h) ≤ OPT − (2Δ/ε)(ln|H| + t)] ≤ e^{−t}. With Δ = 1 and t = ln(1/β): with
probability ≥ 1 − β the chosen stump's training error rate is at most OPT + 2(ln|H| + ln(1/β))/(ε·N), OPT the
best stump's training error rate (`error_bound`).

Records: step 0 is the mechanism at ε = 0 (uniform over H: the mean test error of the class); step 1 the chosen
stump, with its test accuracy, test_loss = its 0-1 test error, and train_accuracy (a private diagnostic).
"""

import math
import time

import numpy as np

from engine.training.datasets import Dataset
from engine.training.learners.outcome import (
    LearnerOutcome,
    Report,
    ShouldStop,
    check_data,
    learner_rng,
    parameter,
    stopped,
)
from engine.training.learners.stumps import Stumps
from engine.training.plan import TrainingPlan
from engine.training.spec import RunSpec

EXPMECH_STREAM = 4001  # the learner's constant in its random stream
BETA = 0.05  # the failure probability of the utility bound shown beside the result


def sample_exponential_mechanism(scores: np.ndarray, epsilon: float, rng: np.random.Generator, *,
                                 sensitivity: float = 1.0) -> int:  # fmt: skip
    """One index drawn with probability ∝ exp(ε·score/(2Δ)) (Gumbel-max: exact, no overflow)."""
    logits = epsilon * np.asarray(scores, dtype=np.float64) / (2.0 * sensitivity)
    return int(np.argmax(logits + rng.gumbel(size=logits.shape)))


def exponential_mechanism_probabilities(scores: np.ndarray, epsilon: float, *, sensitivity: float = 1.0) -> np.ndarray:
    """The exact output distribution of `sample_exponential_mechanism` (a log-sum-exp softmax)."""
    logits = epsilon * np.asarray(scores, dtype=np.float64) / (2.0 * sensitivity)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def error_bound(n: int, hypotheses: int, epsilon: float, beta: float = BETA) -> float:
    """D&R Thm 3.11 for score −errors (Δ = 1): with probability ≥ 1 − β the chosen hypothesis's training error rate
    exceeds the best one's by at most this much."""
    return 2.0 * (math.log(hypotheses) + math.log(1.0 / beta)) / (epsilon * n)


def train_expmech(spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: ShouldStop,
                  report: Report) -> LearnerOutcome:  # fmt: skip
    check_data(plan, len(data.y_train))
    stumps = Stumps(n_features=data.n_features, thresholds=spec.thresholds)
    test_errors = stumps.error_counts(stumps.positions(data.x_test), data.y_test) / len(data.y_test)
    uniform_error = float(test_errors.mean())  # the mechanism at ε = 0
    report(0, test_accuracy=1.0 - uniform_error, test_loss=uniform_error)
    if stopped(should_stop):
        return LearnerOutcome(test_accuracy=1.0 - uniform_error, test_loss=uniform_error, steps=0)
    started = time.perf_counter()
    train_errors = stumps.error_counts(stumps.positions(data.x_train), data.y_train)
    chosen = sample_exponential_mechanism(-train_errors, parameter(plan, "expmech_epsilon"),
                                          learner_rng(spec.seed, EXPMECH_STREAM))  # fmt: skip
    error = float(test_errors[chosen])
    report(1, test_accuracy=1.0 - error, test_loss=error, train_accuracy=1.0 - train_errors[chosen] / plan.n_train,
           elapsed_s=time.perf_counter() - started)  # fmt: skip
    return LearnerOutcome(test_accuracy=1.0 - error, test_loss=error, steps=1)

"""Private PAC learning with the exponential mechanism over decision stumps (Dwork & Roth 2014, ch. 11,
§11.1; Kasiviswanathan, Lee, Nissim, Raskhodnikova, Smith 2008).

Mechanism: the class H is the stumps of `stumps.py` (|H| = 2·d·K, fixed by public numbers). The score of h is
−(number of training examples h misclassifies): adding or removing one example changes it by at most 1
(sensitivity Δ = 1), and every score moves the same way (adding an example can only add errors, removing one
only remove them). For such a monotone score, drawing h with probability ∝ exp(ε·score(h)/Δ) is ε-DP
(McSherry & Talwar 2007, Thm 6; Dwork & Roth, the remark after Thm 3.10): the normalizer moves against the
chosen score, so the factor 2 of the general mechanism (D&R Def. 3.4) is not needed. The learner samples
exactly that and its ledger charges exactly ε: one pure-ε release. Neighbouring datasets differ by adding or
removing one example (the plan's adjacency); under replace-one adjacency the score is not monotone and the
general ε·score/(2Δ) applies (`monotone=False`). The draw is the Gumbel-max trick (argmax of the logits plus
independent Gumbel noise), an exact sample of that softmax that never exponentiates a score.

Utility (D&R Thm 3.11, with the monotone factor): Pr[score(h) ≤ OPT − (c·Δ/ε)(ln|H| + t)] ≤ e^{−t}, c = 1 for a
monotone score, 2 otherwise. With Δ = 1 and t = ln(1/β): with probability ≥ 1 − β the chosen stump's training
error rate is at most OPT + c(ln|H| + ln(1/β))/(ε·N), OPT the best stump's training error rate (`error_bound`).

Records: step 0 is the mechanism at ε = 0 (uniform over H: the mean test error of the class); step 1 the chosen
stump, with its test accuracy, test_loss = its 0-1 test error, and train_accuracy (a private diagnostic).
"""

import math
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
from engine.training.algorithms.learners.stumps import Stumps
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset

EXPMECH_STREAM = 4001  # the learner's constant in its random stream
BETA = 0.05  # the failure probability of the utility bound shown beside the result


def score_factor(monotone: bool) -> float:
    """c in exp(ε·score/(c·Δ)): 1 for a monotone score (every score moves the same way between neighbours), else 2."""
    return 1.0 if monotone else 2.0


def mechanism_logits(scores: np.ndarray, epsilon: float, *, sensitivity: float, monotone: bool) -> np.ndarray:
    return epsilon * np.asarray(scores, dtype=np.float64) / (score_factor(monotone) * sensitivity)


def sample_exponential_mechanism(
    scores: np.ndarray, epsilon: float, rng: np.random.Generator, *, sensitivity: float = 1.0, monotone: bool = False
) -> int:
    """One index drawn with probability ∝ exp(ε·score/(cΔ)) (Gumbel-max: exact, no overflow)."""
    logits = mechanism_logits(scores, epsilon, sensitivity=sensitivity, monotone=monotone)
    return int(np.argmax(logits + rng.gumbel(size=logits.shape)))


def exponential_mechanism_probabilities(
    scores: np.ndarray, epsilon: float, *, sensitivity: float = 1.0, monotone: bool = False
) -> np.ndarray:
    """The exact output distribution of `sample_exponential_mechanism` (a log-sum-exp softmax)."""
    logits = mechanism_logits(scores, epsilon, sensitivity=sensitivity, monotone=monotone)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def error_bound(n: int, hypotheses: int, epsilon: float, beta: float = BETA, *, monotone: bool = True) -> float:
    """D&R Thm 3.11 for score −errors (Δ = 1): with probability ≥ 1 − β the chosen hypothesis's training error rate
    exceeds the best one's by at most this much (c = 1 for the stump learner's monotone score)."""
    return score_factor(monotone) * (math.log(hypotheses) + math.log(1.0 / beta)) / (epsilon * n)


def train_expmech(
    spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: ShouldStop, report: Report
) -> LearnerOutcome:
    check_data(plan, len(data.y_train))
    stumps = Stumps(n_features=data.n_features, thresholds=spec.thresholds)
    test_errors = stumps.error_counts(stumps.positions(data.x_test), data.y_test) / len(data.y_test)
    uniform_error = float(test_errors.mean())  # the mechanism at ε = 0
    report(0, test_accuracy=1.0 - uniform_error, test_loss=uniform_error)
    if stopped(should_stop):
        return LearnerOutcome(test_accuracy=1.0 - uniform_error, test_loss=uniform_error, steps=0)
    started = time.perf_counter()
    train_errors = stumps.error_counts(stumps.positions(data.x_train), data.y_train)
    chosen = sample_exponential_mechanism(
        -train_errors, parameter(plan, "expmech_epsilon"), learner_rng(spec, EXPMECH_STREAM), monotone=True
    )
    error = float(test_errors[chosen])
    report(
        1,
        test_accuracy=1.0 - error,
        test_loss=error,
        train_accuracy=1.0 - train_errors[chosen] / plan.n_train,
        elapsed_s=time.perf_counter() - started,
    )
    return LearnerOutcome(test_accuracy=1.0 - error, test_loss=error, steps=1)

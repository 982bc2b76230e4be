"""The private linear learner: empirical risk minimization over the simplex by private RWM (Dwork & Roth 2014,
ch. 11, §11.3, Algorithm 17, Theorems 11.5-11.6).

D&R's linear learner minimizes E⟨θ, ℓ(x)⟩ over θ in the simplex, the experts being its vertices e_i. Here a
vertex is decision stump i (`stumps.py`) and an example's loss vector is ℓ(x, y)_i = 1[stump i errs on (x, y)] ∈
{0, 1}^k, so ⟨θ, ℓ⟩ is the 0-1 error of the randomized classifier that answers with stump i with probability θ_i.
The mechanism is `rwm.py`'s private RWM, unchanged, on the same seeded stream of T = plan.steps training
examples: (ε, δ)-DP by D&R Thm 11.5, with exactly the plan's ledger (T rounds at 2η). The output is
θ̄ = (1/T) Σ_t e_{a_t}, the empirical distribution of the played vertices, a function of the released plays. Its
test error, reported as test_loss (test_accuracy = 1 − it), is Σ_i θ̄_i·(test error of stump i).

Utility (D&R Thm 11.6, with its O(·) made explicit; `excess_risk_bound`): if the T examples are i.i.d. from D
(a seeded permutation of an i.i.d. training set is), then with probability ≥ 1 − β

    E_D⟨θ̄, ℓ⟩ − min_θ E_D⟨θ, ℓ⟩ ≤ η + ln k/(η·T) + 3·√(ln(3/β) / (2T)).

Proof sketch: E_D⟨θ̄, ℓ⟩ = (1/T) Σ_t μ_{a_t}, μ_i the risk of stump i, and min over the simplex is min_i μ_i. Split
(1/T)Σ μ_{a_t} − μ_{i*} into (i) (1/T)Σ (μ_{a_t} − ℓᵗ_{a_t}), (ii) the realized regret (1/T)Σ ℓᵗ_{a_t} − minᵢ Lᵢ/T
and (iii) minᵢ Lᵢ/T − μ_{i*} ≤ L_{i*}/T − μ_{i*}. (i) is a martingale with increments in an interval of length 1
(x_t is independent of a_t); the realized regret is the expected one, ≤ η + ln k/(ηT) by D&R Thm 11.1, plus a
martingale of the same kind; (iii) is a mean of T i.i.d. terms in [0, 1] for the fixed best stump i*. Azuma-
Hoeffding on each of the three at β/3 gives √(ln(3/β)/(2T)) apiece. With the private η = ε/√(32 T ln(1/δ)) the
first two terms are D&R Thm 11.3's O(√ln(1/δ)·ln k / (ε√T)).
"""

import math

import numpy as np

from engine.training.algorithms.learners.outcome import LearnerOutcome, Report, ShouldStop
from engine.training.algorithms.learners.rwm import Evaluate, train_on_stream
from engine.training.algorithms.learners.stumps import Stumps
from engine.training.config import learner_budget
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset

BETA = 0.05


def excess_risk_bound(*, rounds: int, experts: int, eta: float, beta: float = BETA) -> float:
    """With probability ≥ 1 − β, the excess risk of θ̄ over the best vertex after T rounds of RWM(η)."""
    return eta + math.log(experts) / (eta * rounds) + 3.0 * math.sqrt(math.log(3.0 / beta) / (2.0 * rounds))


def private_excess_risk_bound(*, rounds: int, experts: int, epsilon: float, delta: float, beta: float = BETA) -> float:
    """`excess_risk_bound` at the private rate η = ε/√(32 T ln(1/δ)) the plan uses."""
    eta = learner_budget.rwm_eta(target_epsilon=epsilon, rounds=rounds, delta=delta)
    return excess_risk_bound(rounds=rounds, experts=experts, eta=eta, beta=beta)


def randomized_classifier_evaluator(stumps: Stumps, data: Dataset) -> Evaluate:
    """θ̄ = plays / Σ plays; its test error is Σ_i θ̄_i · test error of stump i."""
    test_errors = stumps.error_counts(stumps.positions(data.x_test), data.y_test) / len(data.y_test)

    def evaluate(plays: np.ndarray) -> tuple[float, float]:
        error = float(np.asarray(plays, dtype=np.float64) @ test_errors / np.sum(plays))
        return 1.0 - error, error

    return evaluate


def train_rwm_linear(
    spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: ShouldStop, report: Report
) -> LearnerOutcome:
    return train_on_stream(
        spec, plan, data, should_stop=should_stop, report=report, evaluate_of=randomized_classifier_evaluator
    )

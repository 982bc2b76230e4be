"""Private online learning: randomized weighted majority over decision-stump experts (Dwork & Roth 2014,
ch. 11, §11.2, Algorithms 15-16, Theorems 11.1-11.2).

Stream: round t = 1..T uses training example π(t), π a permutation of the training set drawn from the spec's
seed alone (the first T of it), so each example is used at most once. Expert i is stump i of `stumps.py`
(k = 2·d·K experts); its loss ℓᵢᵗ = 1[stump i misclassifies example π(t)] ∈ {0, 1}.

Mechanism (RWM(η), D&R Algorithm 16): round t plays expert a_t = i with probability ∝ exp(−η·Lᵢ), Lᵢ the
cumulative loss of expert i over rounds 1..t−1 (log-weights, so nothing underflows), then observes ℓᵗ. Replacing
one training example changes one round's loss vector, so every later score changes by at most 1: each round is
an exponential mechanism at 2η-DP, and η = ε/√(32 T ln(1/δ)) from the plan (D&R Thm 11.2) gives (ε, δ) over the T
rounds; the plan's ledger holds exactly those T releases of 2η. The released output is the sequence of played
experts a_1..a_T, so its counts (the empirical distribution of the plays) are released too.

Utility: D&R Thm 11.1, multiplied by the horizon: for every fixed loss sequence in [0, 1]^k and every prefix t,
E[Σ_{s≤t} ℓ_{a_s}] − minᵢ Σ_{s≤t} ℓᵢ ≤ η·t + ln k/η (`regret_bound`). The reference is non-private RWM on the
same stream at η* = √(8 ln k / T), the rate minimizing the sharper bound ηT/8 + ln k/η (Cesa-Bianchi & Lugosi
2006, Thm 2.2; `hedge_regret_bound`), which is then √(T ln k / 2).

Records (at most ~200 evenly spaced rounds plus the last): `regret` = cumulative loss of the played experts −
the best expert's cumulative loss (realized, a private diagnostic computed on training data), `regret_bound`,
`regret_nonprivate` (the reference's realized regret, also a private diagnostic), `train_accuracy` = share of
rounds the played expert was right (private diagnostic), and the test metrics of the released plays. For
rwm_online the model is the majority vote of the played experts (each play one vote): a function of the
released plays and public test data, i.e. post-processing. The final weight vector is NOT used: it is a
function of all the losses and is never released.
"""

import itertools
import math
import time
from collections.abc import Callable

import numpy as np

from engine.training.algorithms.learners.outcome import (
    LearnerOutcome,
    Report,
    ShouldStop,
    check_data,
    learner_rng,
    parameter,
    report_points,
    stopped,
)
from engine.training.algorithms.learners.stumps import Stumps
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset

RWM_STREAM = 4003  # the learner's constant in its random stream (rwm_online and rwm_linear share the stream)
ROUNDS_PER_POLL = 100  # should_stop is polled, and expert losses computed, this many rounds at a time

Evaluate = Callable[[np.ndarray], tuple[float, float]]  # play counts (k,) → (test accuracy, test loss)


def regret_bound(*, eta: float, rounds: int, experts: int) -> float:
    """D&R Thm 11.1 × t: E[regret after t rounds] ≤ η·t + ln k / η, any losses in [0, 1]."""
    return eta * rounds + math.log(experts) / eta


def hedge_regret_bound(*, eta: float, rounds: int, experts: int) -> float:
    """The sharper bound of the same algorithm: E[regret after t rounds] ≤ η·t/8 + ln k / η (Hoeffding's lemma)."""
    return eta * rounds / 8.0 + math.log(experts) / eta


def nonprivate_eta(*, experts: int, rounds: int) -> float:
    """η* = √(8 ln k / T): minimizes `hedge_regret_bound` at t = T."""
    return math.sqrt(8.0 * math.log(experts) / rounds)


class WeightedMajority:
    """RWM(η) on k experts: plays ∝ exp(−η·cumulative loss) and keeps the tallies of its plays."""

    def __init__(self, experts: int, eta: float, rng: np.random.Generator):
        self.eta, self.rng = eta, rng
        self.expert_loss = np.zeros(experts)  # Lᵢ: cumulative loss of each expert
        self.plays = np.zeros(experts, dtype=np.int64)  # how often each expert was played (released)
        self.loss = 0.0  # cumulative loss of the played experts
        self.expected_loss = 0.0  # Σ_t p_t·ℓᵗ: what the regret bound is about

    def probabilities(self) -> np.ndarray:
        weights = np.exp(-self.eta * (self.expert_loss - self.expert_loss.min()))
        return weights / weights.sum()

    def play_rounds(self, losses: np.ndarray) -> np.ndarray:
        """Play r rounds with losses (r, k) in [0, 1]: round s plays ∝ exp(−η·(L + losses of rounds before s)),
        then observes its row. The choice never depends on earlier plays, only on earlier losses, so the r rounds
        are drawn at once. Returns the r experts played."""
        weights = np.empty_like(losses, dtype=np.float64)  # Lᵢ before each round, then the weights (in place)
        weights[0] = self.expert_loss
        np.cumsum(losses[:-1], axis=0, out=weights[1:])
        weights[1:] += self.expert_loss
        weights -= weights.min(axis=1, keepdims=True)
        weights *= -self.eta
        np.exp(weights, out=weights)
        cumulative = np.cumsum(weights, axis=1)
        totals = cumulative[:, -1]
        drawn = (cumulative <= (self.rng.random(len(losses)) * totals)[:, None]).sum(axis=1)
        experts = np.minimum(drawn, losses.shape[1] - 1)
        self.plays += np.bincount(experts, minlength=len(self.plays))
        self.loss += float(losses[np.arange(len(losses)), experts].sum())
        self.expected_loss += float(np.sum(np.einsum("rk,rk->r", weights, losses) / totals))
        self.expert_loss += losses.sum(axis=0)
        return experts

    @property
    def regret(self) -> float:
        return self.loss - float(self.expert_loss.min())

    @property
    def expected_regret(self) -> float:
        return self.expected_loss - float(self.expert_loss.min())


def segments(rounds: int, stops: set[int]) -> list[tuple[int, int]]:
    """Rounds 0..rounds−1 cut at every multiple of ROUNDS_PER_POLL and after every round in `stops`."""
    cuts = sorted({0, rounds} | set(range(ROUNDS_PER_POLL, rounds, ROUNDS_PER_POLL)) | {s for s in stops if s < rounds})
    return list(itertools.pairwise(cuts))


def play_stream(
    losses_of: Callable[[np.ndarray], np.ndarray],
    order: np.ndarray,
    learners: list[WeightedMajority],
    *,
    should_stop: ShouldStop = None,
    checkpoints: set[int] = frozenset(),
    on_checkpoint: Callable[[int], None] | None = None,
) -> int:
    """Runs the learners on the rounds `order` (example indices); `losses_of(indices)` gives their (r, k) losses.
    Calls `on_checkpoint(rounds done)` after each round in `checkpoints`. Returns the rounds played (fewer when
    stopped: `should_stop` is polled at least every ROUNDS_PER_POLL rounds)."""
    done = 0
    for start, end in segments(len(order), checkpoints):
        if stopped(should_stop):
            break
        losses = losses_of(order[start:end])
        for learner in learners:
            learner.play_rounds(losses)
        done = end
        if on_checkpoint is not None and done in checkpoints:
            on_checkpoint(done)
    return done


def train_on_stream(
    spec: RunSpec,
    plan: TrainingPlan,
    data: Dataset,
    *,
    should_stop: ShouldStop,
    report: Report,
    evaluate_of: Callable[[Stumps, Dataset], Evaluate],
) -> LearnerOutcome:
    """Private RWM (η from the plan) and the non-private reference on the seeded stream, reporting as it goes;
    `evaluate_of` turns the released play counts into test metrics (rwm_online and rwm_linear differ only there)."""
    check_data(plan, len(data.y_train))
    rounds = plan.steps
    if rounds > plan.n_train:
        raise ValueError(f"{rounds} rounds but only {plan.n_train} training examples: each is used at most once")
    stumps = Stumps(n_features=data.n_features, thresholds=spec.thresholds)
    evaluate = evaluate_of(stumps, data)
    order_rng, private_rng, reference_rng = learner_rng(spec, RWM_STREAM).spawn(3)
    order = order_rng.permutation(plan.n_train)[:rounds]
    private = WeightedMajority(stumps.size, parameter(plan, "eta"), private_rng)
    reference = WeightedMajority(stumps.size, nonprivate_eta(experts=stumps.size, rounds=rounds), reference_rng)
    positions, y = stumps.positions(data.x_train), data.y_train

    def losses_of(indices: np.ndarray) -> np.ndarray:
        return stumps.losses(positions.rows(indices), y[indices]).astype(np.float64)

    accuracy, loss = evaluate(np.ones(stumps.size))  # before any play: every expert equally likely
    report(0, test_accuracy=accuracy, test_loss=loss)
    checkpoints, started = report_points(rounds), time.perf_counter()

    def on_checkpoint(done: int) -> None:
        nonlocal accuracy, loss
        accuracy, loss = evaluate(private.plays)
        report(
            done,
            test_accuracy=accuracy,
            test_loss=loss,
            regret=private.regret,
            regret_bound=regret_bound(eta=private.eta, rounds=done, experts=stumps.size),
            regret_nonprivate=reference.regret,
            train_accuracy=1.0 - private.loss / done,
            elapsed_s=time.perf_counter() - started,
        )

    done = play_stream(
        losses_of,
        order,
        [private, reference],
        should_stop=should_stop,
        checkpoints=checkpoints,
        on_checkpoint=on_checkpoint,
    )
    if done and done not in checkpoints:  # stopped between report points: the last round played is reported
        on_checkpoint(done)
    return LearnerOutcome(test_accuracy=accuracy, test_loss=loss, steps=done)


def most_played_evaluator(stumps: Stumps, data: Dataset) -> Evaluate:
    """rwm_online's model: the stump played most often (the mode of the released plays: post-processing; the
    final weights, a function of every loss, are never used). A majority vote of the plays was tried first: on
    Adult most plays go to stumps that almost always predict 0, so the vote was the constant predictor."""
    vote, labels = stumps.voter(stumps.positions(data.x_test)), data.y_test == 1

    def evaluate(plays: np.ndarray) -> tuple[float, float]:
        chosen = np.zeros_like(plays)
        chosen[int(np.argmax(plays))] = 1
        error = float(np.mean((vote(chosen) > 0.5) != labels))
        return 1.0 - error, error

    return evaluate


def train_rwm_online(
    spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: ShouldStop, report: Report
) -> LearnerOutcome:
    return train_on_stream(spec, plan, data, should_stop=should_stop, report=report, evaluate_of=most_played_evaluator)

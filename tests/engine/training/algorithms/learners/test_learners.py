"""The textbook private learners (Dwork & Roth ch. 11) run exactly the mechanisms their ledgers charge.

Statistical tests use fixed seeds, so they are deterministic; each states its false-failure rate: the probability
that a correct implementation fails on a fresh seed (ALPHA unless said otherwise).
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from engine.training import parse_spec, plan_run, train
from engine.training.algorithms.learners import expmech, linear, rwm, sq
from engine.training.algorithms.learners.learner_runs import LEARNERS
from engine.training.algorithms.learners.outcome import parameter, report_points
from engine.training.algorithms.learners.stumps import Stumps
from engine.training.config.keys import Algorithm
from engine.training.datasets import Dataset

ALPHA = 1e-4
N_FEATURES = 104  # Adult's: the specs name "adult", whose public facts (SQ's queries per iteration) the plans use


def easy_problem(n_train: int = 20_000, n_test: int = 2_000, seed: int = 0) -> Dataset:
    """Two classes decided by binary feature 0 (10% label noise); 3 uniform and 100 sparse binary distractors.
    Features in [0, 1] like every dataset's; the best stump and the best linear model err 10%."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    x = (rng.random((n, N_FEATURES)) < 0.05).astype(np.float32)
    x[:, 0] = rng.random(n) < 0.5
    x[:, 1:4] = rng.random((n, 3))
    y = ((x[:, 0] == 1) ^ (rng.random(n) < 0.1)).astype(np.int64)
    return Dataset(
        name="adult", x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:], n_classes=2
    )


@pytest.fixture(scope="module")
def easy() -> Dataset:
    return easy_problem()


def learner_spec(algorithm: str, **overrides):
    return parse_spec(
        {"dataset": "adult", "algorithm": algorithm, "seed": 0, "delta": 1e-6, "target_epsilon": 1.0, **overrides}
    )


def run(spec, data: Dataset, **kwargs):
    records = []
    result = train(spec, dataset=data, plan=plan_run(spec, n_train=len(data.y_train)), on_step=records.append, **kwargs)
    return result, records


# ------------------------------------------------------------------ stumps: the class, counted without an N × k matrix


def test_dispatch_covers_every_learner():
    assert set(LEARNERS) == {a for a in Algorithm if a.learner}


def test_stump_counts_losses_and_votes_match_a_brute_force_loop():
    rng = np.random.default_rng(1)
    stumps = Stumps(n_features=3, thresholds=4)
    x = rng.random((80, 3))
    x[:10, 0] = stumps.grid[1]  # on the grid: x_j > t and x_j < t both false
    x[10:15, 1], x[15:20, 2] = 0.0, 1.0
    y = rng.integers(0, 2, 80)
    predictions = np.array(
        [[s * (float(xn[j]) - t) > 0 for xn in x] for s in (1, -1) for j in range(3) for t in stumps.grid]
    )
    assert predictions.shape == (stumps.size, 80)
    positions = stumps.positions(x)

    np.testing.assert_array_equal(stumps.error_counts(positions, y), (predictions != (y == 1)).sum(axis=1))
    np.testing.assert_array_equal(stumps.losses(positions, y), (predictions != (y == 1)).T)
    weights = rng.random(stumps.size)
    np.testing.assert_allclose(stumps.voter(positions)(weights), weights @ predictions)
    for index in (0, 7, stumps.size - 1):
        np.testing.assert_array_equal(stumps.stump(index).predict(x), predictions[index])


# ------------------------------------------------------------------ exponential mechanism


@pytest.mark.parametrize("monotone", [True, False])
def test_exponential_mechanism_draws_with_probability_proportional_to_exp_of_its_scaled_score(monotone):
    scores, epsilon, draws = np.array([0.0, -1.0, -2.0, -3.0, -5.0, -8.0]), 1.0, 20_000
    c = 1.0 if monotone else 2.0
    expected = np.exp(epsilon * scores / c) / np.exp(epsilon * scores / c).sum()
    probabilities = expmech.exponential_mechanism_probabilities(scores, epsilon, monotone=monotone)
    np.testing.assert_allclose(probabilities, expected)
    rng = np.random.default_rng(2)
    counts = np.bincount(
        [expmech.sample_exponential_mechanism(scores, epsilon, rng, monotone=monotone) for _ in range(draws)],
        minlength=len(scores),
    )
    assert stats.chisquare(counts, expected * draws).pvalue >= ALPHA  # false failure: ALPHA


def max_log_ratio(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.max(np.abs(np.log(p) - np.log(q))))


def test_the_stump_learners_monotone_mechanism_is_exactly_epsilon_dp_for_add_or_remove_one(easy):
    """Exact output distributions on a dataset and its neighbours (one example added, one removed): every stump's
    probability moves by a factor of at most e^ε, and the bound is attained to within a few percent (the factor 2
    of the general mechanism would leave half the budget unspent)."""
    stumps = Stumps(n_features=N_FEATURES, thresholds=8)
    x, y = easy.x_train[:300], easy.y_train[:300]
    epsilon = 1.5
    base = expmech.exponential_mechanism_probabilities(
        -stumps.error_counts(stumps.positions(x), y), epsilon, monotone=True
    )
    worst = 0.0
    for neighbour in ((x[1:], y[1:]), (x[:-1], y[:-1]), (np.vstack([x, x[:1]]), np.append(y, 1 - y[0]))):
        errors = stumps.error_counts(stumps.positions(neighbour[0]), neighbour[1])
        other = expmech.exponential_mechanism_probabilities(-errors, epsilon, monotone=True)
        worst = max(worst, max_log_ratio(base, other))
    assert worst <= epsilon * (1 + 1e-12)
    assert worst >= 0.5 * epsilon, "the monotone mechanism spends more than half its budget on some neighbour"


def test_the_monotone_scaling_is_not_dp_where_scores_move_both_ways():
    """Why monotonicity matters (and why RWM, whose neighbours replace a round, keeps the general factor 2): scores
    that move in opposite directions by 1 make exp(ε·score) a 2ε mechanism; exp(ε·score/2) stays ε-DP."""
    epsilon, others = 1.0, 1000  # one score rises by 1 while a thousand others fall by 1
    before, after = np.array([-1.0] + [0.0] * others), np.array([0.0] + [-1.0] * others)
    ratio = max_log_ratio(
        expmech.exponential_mechanism_probabilities(before, epsilon, monotone=True),
        expmech.exponential_mechanism_probabilities(after, epsilon, monotone=True),
    )
    assert ratio > 1.5 * epsilon
    general = max_log_ratio(
        expmech.exponential_mechanism_probabilities(before, epsilon),
        expmech.exponential_mechanism_probabilities(after, epsilon),
    )
    assert general <= epsilon * (1 + 1e-12)


def test_exponential_mechanism_is_stable_at_huge_scores():
    scores = np.array([-40_000.0, -40_001.0, 0.0]) * 1e3
    assert expmech.sample_exponential_mechanism(scores, 100.0, np.random.default_rng(0)) == 2
    assert expmech.exponential_mechanism_probabilities(scores, 100.0)[2] == 1.0


def test_chosen_stump_meets_the_utility_bound(easy):
    """D&R Thm 3.11 with the monotone factor c = 1: P[errors(h) > OPT + (ln|H| + ln 1/β)/ε] ≤ β. 2,000 draws at
    β = 0.05: the share over the bound is ≤ 0.05 in expectation; it exceeds 0.10 with probability
    ≤ exp(−2·2000·0.05²) < ALPHA (Hoeffding)."""
    stumps = Stumps(n_features=N_FEATURES, thresholds=16)
    x, y = easy.x_train[:2000], easy.y_train[:2000]
    errors = stumps.error_counts(stumps.positions(x), y)
    epsilon, beta, rng = 0.05, 0.05, np.random.default_rng(3)
    bound = errors.min() / len(y) + expmech.error_bound(len(y), stumps.size, epsilon, beta)
    chosen = [expmech.sample_exponential_mechanism(-errors, epsilon, rng, monotone=True) for _ in range(2000)]
    assert np.mean(errors[chosen] / len(y) > bound) <= 0.10
    assert expmech.error_bound(1000, 100, 2.0, 0.05) == pytest.approx((math.log(100) + math.log(20)) / 2000)
    assert expmech.error_bound(1000, 100, 2.0, 0.05, monotone=False) == pytest.approx(
        (math.log(100) + math.log(20)) / 1000
    )


# ------------------------------------------------------------------ SQ learner: Laplace answers, d queries an iteration


def test_sq_answers_carry_laplace_noise_of_the_plans_scale(easy):
    plan = plan_run(learner_spec("sq_laplace", epochs=10, lr=1.0, target_epsilon=4.0), n_train=len(easy.y_train))
    scale = parameter(plan, "laplace_scale")
    assert scale == pytest.approx(10 * (N_FEATURES + 1) / 4.0)
    x1, y = sq.with_bias(easy.x_train[:500]), easy.y_train[:500].astype(float)
    values = sq.gradient_queries(np.linspace(-1, 1, N_FEATURES + 1), x1, y)
    assert values.min() >= 0 and values.max() <= 1
    oracle = sq.LaplaceSumOracle(scale, np.random.default_rng(4))
    noise = np.concatenate([oracle.answer(values) - values.sum(axis=0) for _ in range(200)])  # 21,000 draws
    assert stats.kstest(noise / scale, stats.laplace.cdf).pvalue >= ALPHA  # false failure: ALPHA


def test_sq_learner_asks_exactly_d_queries_per_iteration_at_the_plans_scale(easy, monkeypatch):
    oracles = []

    class RecordingOracle(sq.LaplaceSumOracle):
        def __init__(self, scale, rng):
            super().__init__(scale, rng)
            oracles.append(self)

    monkeypatch.setattr(sq, "LaplaceSumOracle", RecordingOracle)
    spec = learner_spec("sq_laplace", epochs=7, lr=2.0)
    result, records = run(spec, easy)
    plan = plan_run(spec, n_train=len(easy.y_train))
    (oracle,) = oracles
    assert oracle.scale == parameter(plan, "laplace_scale") == 7 * (N_FEATURES + 1) / 1.0
    assert oracle.queries_per_call == [N_FEATURES + 1] * 7 == [int(parameter(plan, "queries_per_iteration"))] * 7
    assert [r.step for r in records] == list(range(8)) and result.steps == 7


def test_the_clip_of_the_gradient_query_never_binds_for_logistic_loss():
    rng = np.random.default_rng(5)
    x1, y = sq.with_bias(rng.random((300, 6))), rng.integers(0, 2, 300).astype(float)
    theta = rng.normal(scale=20, size=7)
    raw = (sq.sigmoid(x1 @ theta) - y)[:, None] * x1
    np.testing.assert_allclose(sq.gradient_queries(theta, x1, y), (raw + 1) / 2)


def test_sq_refuses_data_whose_width_the_plan_did_not_charge(easy):
    narrow = Dataset(
        name="adult",
        x_train=easy.x_train[:, :10],
        y_train=easy.y_train,
        x_test=easy.x_test[:, :10],
        y_test=easy.y_test,
        n_classes=2,
    )
    with pytest.raises(ValueError, match="queries per iteration"):
        run(learner_spec("sq_laplace", epochs=2, lr=1.0), narrow)


# ------------------------------------------------------------------ RWM: η, the regret bound, the reference


def test_rwm_runs_at_the_plans_eta_and_the_reference_at_its_optimal_rate(easy, monkeypatch):
    etas = []

    class RecordingMajority(rwm.WeightedMajority):
        def __init__(self, experts, eta, rng):
            super().__init__(experts, eta, rng)
            etas.append(eta)

    monkeypatch.setattr(rwm, "WeightedMajority", RecordingMajority)
    spec = learner_spec("rwm_online", rounds=500, target_epsilon=2.0)
    run(spec, easy)
    k = 2 * N_FEATURES * 16
    assert etas == [
        pytest.approx(2.0 / math.sqrt(32 * 500 * math.log(1e6))),
        pytest.approx(math.sqrt(8 * math.log(k) / 500)),
    ]
    assert parameter(plan_run(spec, n_train=len(easy.y_train)), "eta") == etas[0]


def perfect_expert_stream(rounds: int, experts: int, seed: int) -> np.ndarray:
    """Expert 0 never errs; the others err on each round with probability 1/2."""
    losses = (np.random.default_rng(seed).random((rounds, experts)) < 0.5).astype(float)
    losses[:, 0] = 0.0
    return losses


@pytest.mark.parametrize("eta", [0.05, "nonprivate"])
def test_regret_stays_below_the_bound_when_one_expert_is_perfect(eta):
    rounds, experts = 3000, 50
    losses = perfect_expert_stream(rounds, experts, seed=6)
    eta = rwm.nonprivate_eta(experts=experts, rounds=rounds) if eta == "nonprivate" else eta
    learner = rwm.WeightedMajority(experts, eta, np.random.default_rng(7))
    checkpoints = {500, 1000, 3000}
    seen = []

    def check(done: int) -> None:
        seen.append(done)
        bound = rwm.regret_bound(eta=eta, rounds=done, experts=experts)
        # D&R Thm 11.1 and the sharper Hedge bound hold for the expectation Σ p_t·ℓᵗ exactly, whatever the seed
        assert learner.expected_regret <= min(bound, rwm.hedge_regret_bound(eta=eta, rounds=done, experts=experts))
        # the realized regret exceeds the expected one by s with probability ≤ exp(−2s²/t) (Azuma-Hoeffding)
        assert learner.regret <= bound + math.sqrt(done * math.log(1 / ALPHA) / 2)  # false failure: ALPHA

    done = rwm.play_stream(
        lambda rows: losses[rows], np.arange(rounds), [learner], checkpoints=checkpoints, on_checkpoint=check
    )
    assert done == rounds and seen == [500, 1000, 3000]
    assert learner.expert_loss[0] == 0 and learner.regret == learner.loss
    # with a perfect expert the expected regret is ≤ ln k/(1 − e^{−η}) ≤ 81 while the final bound is ≥ 228: the
    # realized regret reaches the bound with probability ≤ exp(−2·147²/3000) < 1e-6
    assert learner.regret <= rwm.regret_bound(eta=eta, rounds=rounds, experts=experts)


def test_rwm_plays_are_drawn_from_the_weights_whatever_the_chunking():
    """Drawing a chunk of rounds at once is RWM round by round: the same plays from the same seed."""
    losses = (np.random.default_rng(8).random((250, 30)) < 0.4).astype(float)
    one_by_one, chunked = (rwm.WeightedMajority(30, 0.3, np.random.default_rng(9)) for _ in range(2))
    plays = [one_by_one.play_rounds(losses[t : t + 1])[0] for t in range(250)]
    chunks = [chunked.play_rounds(losses[:100]), chunked.play_rounds(losses[100:])]
    np.testing.assert_array_equal(np.concatenate(chunks), plays)
    np.testing.assert_allclose(chunked.expert_loss, losses.sum(axis=0))
    assert chunked.expected_loss == pytest.approx(one_by_one.expected_loss)


def test_one_rwm_round_plays_expert_i_with_probability_proportional_to_exp_of_minus_eta_loss():
    experts, eta, draws = 5, 0.7, 20_000
    learner = rwm.WeightedMajority(experts, eta, np.random.default_rng(10))
    learner.expert_loss = np.array([0.0, 1.0, 2.0, 3.0, 5.0])
    expected = np.exp(-eta * learner.expert_loss) / np.exp(-eta * learner.expert_loss).sum()
    np.testing.assert_allclose(learner.probabilities(), expected)
    counts = np.zeros(experts)
    for _ in range(draws // 100):  # 100 rounds of zero loss: the weights stay put
        rounds = learner.play_rounds(np.zeros((100, experts)))
        counts += np.bincount(rounds, minlength=experts)
    assert stats.chisquare(counts, expected * draws).pvalue >= ALPHA  # false failure: ALPHA


def test_linear_learners_excess_risk_bound_and_randomized_error(easy):
    bound = linear.excess_risk_bound(rounds=10_000, experts=100, eta=0.02)
    assert bound == pytest.approx(0.02 + math.log(100) / 200 + 3 * math.sqrt(math.log(60) / 20_000))
    private = linear.private_excess_risk_bound(rounds=10_000, experts=100, epsilon=1.0, delta=1e-6)
    assert private == pytest.approx(
        linear.excess_risk_bound(rounds=10_000, experts=100, eta=1.0 / math.sqrt(32 * 10_000 * math.log(1e6)))
    )
    stumps = Stumps(n_features=N_FEATURES, thresholds=4)
    evaluate = linear.randomized_classifier_evaluator(stumps, easy)
    plays = np.zeros(stumps.size)
    plays[[0, 5]] = [3, 1]
    errors = [np.mean(stumps.stump(i).predict(easy.x_test) != (easy.y_test == 1)) for i in (0, 5)]
    accuracy, error = evaluate(plays)
    assert error == pytest.approx(0.75 * errors[0] + 0.25 * errors[1]) and accuracy == pytest.approx(1 - error)


def test_report_points_are_few_evenly_spaced_and_end_at_the_last_step():
    points = report_points(32_561)
    assert len(points) <= 201 and max(points) == 32_561 and min(points) >= 1
    assert report_points(7) == set(range(1, 8))


# ------------------------------------------------------------------ end to end through the trainer


@pytest.mark.parametrize(
    ("algorithm", "options", "least_accuracy"),
    [
        ("expmech_stumps", {"target_epsilon": 1.0}, 0.85),
        ("sq_laplace", {"target_epsilon": 8.0, "epochs": 10, "lr": 4.0}, 0.8),
        ("rwm_online", {"target_epsilon": 8.0, "rounds": 3000}, 0.85),
        ("rwm_linear", {"target_epsilon": 8.0, "rounds": 3000}, 0.6),
    ],
)
def test_each_learner_trains_within_its_target_epsilon_and_beats_chance(easy, algorithm, options, least_accuracy):
    spec = learner_spec(algorithm, **options)
    result, records = run(spec, easy)
    plan = plan_run(spec, n_train=len(easy.y_train))
    assert result.epsilon <= spec.target_epsilon * (1 + 1e-9)
    assert result.steps == result.planned_steps == plan.steps and not result.stopped_early
    assert result.test_accuracy >= least_accuracy  # the best stump and the best linear model: 0.9
    assert records[0].step == 0 and records[0].test_accuracy is not None
    assert [r.step for r in records] == sorted({r.step for r in records}) and records[-1].step == plan.steps
    assert len(records) <= 202 and records[-1].test_accuracy == pytest.approx(result.test_accuracy)
    if algorithm.startswith("rwm"):
        last = records[-1]
        assert last.regret is not None and last.regret_nonprivate is not None
        assert last.regret_bound == pytest.approx(
            rwm.regret_bound(eta=parameter(plan, "eta"), rounds=3000, experts=2 * N_FEATURES * 16)
        )


def test_rwm_stops_when_asked_and_reports_the_rounds_played(easy):
    polls = []

    def should_stop() -> bool:
        polls.append(1)
        return len(polls) > 3

    spec = learner_spec("rwm_linear", rounds=3000, target_epsilon=8.0)
    result, records = run(spec, easy, should_stop=should_stop)
    assert result.stopped_early and 0 < result.steps < 3000
    assert records[-1].step == result.steps and records[-1].regret is not None
    full_epsilon = run(spec, easy)[0].epsilon
    assert result.epsilon < full_epsilon


def test_expmech_and_sq_stop_before_spending_when_asked(easy):
    for spec in (learner_spec("expmech_stumps"), learner_spec("sq_laplace", epochs=5, lr=1.0)):
        result, records = run(spec, easy, should_stop=lambda: True)
        assert result.steps == 0 and [r.step for r in records] == [0] and result.stopped_early


@pytest.mark.slow
def test_learners_run_end_to_end_from_the_cli(home, tmp_path):
    """`python -m engine train` on a two-class CSV: the exponential mechanism and the private linear learner each
    report an ε within the target and their privacy statement."""
    from tests.helpers import cli, last_json, synthetic_csv, synthetic_schema

    csv = tmp_path / "people.csv"
    csv.write_bytes(synthetic_csv(rows=300))
    schema = synthetic_schema()
    for algorithm in ("expmech_stumps", "rwm_linear"):
        spec = tmp_path / f"{algorithm}.json"
        spec.write_text(
            json.dumps(
                {
                    "dataset": f"csv:{csv}",
                    "schema": schema,
                    "algorithm": algorithm,
                    "seed": 0,
                    "delta": 1e-4,
                    "target_epsilon": 2.0,
                }
            )
        )
        result = last_json(cli(home, "train", str(spec)))
        assert result["algorithm"] == algorithm and 0 < result["epsilon"] <= 2.0
        assert result["steps"] == result["planned_steps"] and "differential privacy" in result["privacy_statement"]

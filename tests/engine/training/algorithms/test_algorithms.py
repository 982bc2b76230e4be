"""Every algorithm of the engine does what its privacy analysis assumes.

Statistical tests use fixed seeds and thresholds with a stated false-failure rate ALPHA: the
probability that a correct implementation fails on a fresh seed.
"""

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from engine.training import Algorithm, parse_spec, plan_run, train
from engine.training.algorithms.dpsgd import clip_and_accumulate, clip_thresholds
from engine.training.algorithms.noisy_gd import BinaryLogistic, clip_rows, noisy_count, noisy_gd_step
from engine.training.algorithms.nonprivate import ShuffledBatches
from engine.training.clipping import BookKeepingClipper, per_layer_thresholds
from engine.training.config.plan import TrainingPlan
from engine.training.config.schedules import Schedule, ScheduleKind
from engine.training.features.pca import normalize_rows, pca_projection, symmetric_gaussian
from engine.training.models.architectures import build_model
from tests.helpers import blobs_dataset, fast_spec, noisy_gd_spec, square_images

ALPHA = 1e-6


@pytest.fixture(scope="module")
def blobs_csv(tmp_path_factory) -> dict:
    return blobs_dataset(tmp_path_factory.mktemp("csv"))


def rdp_epsilon_of(events: list[tuple[dp_event.DpEvent, int]], delta: float) -> float:
    accountant = RdpAccountant()
    for event, count in events:
        accountant.compose(event, count)
    return accountant.get_epsilon(delta)


# ------------------------------------------------------------------ DP-SGD: physical batches, per-layer clipping


@pytest.mark.parametrize("physical", [1, 7, 16, 50])
def test_accumulated_physical_batches_equal_one_big_batch(physical):
    torch.manual_seed(0)
    model = build_model("mlp", n_features=10, n_classes=4, hidden=(8,)).double()
    x, y = torch.randn(50, 10, dtype=torch.float64) * 2, torch.randint(0, 4, (50,))
    clipper = BookKeepingClipper(model)
    whole = clipper.clipped_sum(x, y, 0.5)
    split = clip_and_accumulate(clipper, x, y, 0.5, physical)
    for a, b in zip(whole.grads, split.grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(whole.norms, split.norms)
    torch.testing.assert_close(whole.loss_sum, split.loss_sum)
    assert torch.equal(whole.clipped, split.clipped)


def test_training_with_physical_batches_matches_training_without(digits):
    base = fast_spec(epochs=2, noise_multiplier=1.0, lot_size=200)
    del base["target_epsilon"]
    one = train(parse_spec(base), dataset=digits)
    split = train(parse_spec(base | {"physical_batch_size": 32}), dataset=digits)
    assert split.test_accuracy == pytest.approx(one.test_accuracy, abs=3 / len(digits.x_test))
    assert split.epsilon == one.epsilon and split.steps == one.steps


def test_per_layer_thresholds_square_sum_to_c_and_bound_each_layer():
    thresholds = per_layer_thresholds(2.0, 3)
    assert sum(t * t for t in thresholds) == pytest.approx(4.0)
    torch.manual_seed(1)
    model = build_model("mlp", n_features=5, n_classes=3, hidden=(4, 4)).double()
    clipper = BookKeepingClipper(model)
    assert clip_thresholds(clipper, 2.0, "per_layer") == per_layer_thresholds(2.0, len(clipper.layer_names))
    assert clip_thresholds(clipper, 2.0, "flat") == 2.0
    x, y = torch.randn(1, 5, dtype=torch.float64) * 50, torch.randint(0, 3, (1,))
    result = clipper.clipped_sum(x, y, per_layer_thresholds(2.0, 3))  # one example: the sum is its gradient
    total = torch.sqrt(sum(g.pow(2).sum() for g in result.grads))
    assert float(total) <= 2.0 + 1e-9  # the whole gradient still has norm ≤ C


# ------------------------------------------------------------------ noisy gradient descent (Near & Abuah)


def test_input_clipping_bounds_every_logistic_gradient():
    torch.manual_seed(2)
    bound = 0.7
    x = clip_rows(torch.randn(64, 9, dtype=torch.float64) * 5, bound)
    assert float(torch.linalg.vector_norm(x, dim=1).max()) <= bound + 1e-12
    y = torch.randint(0, 2, (64,))
    model = BinaryLogistic(9).double()
    for _ in range(5):  # for any θ
        torch.nn.init.normal_(model.linear.weight, std=10.0)
        for i in range(len(x)):
            loss = torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
            (g,) = torch.autograd.grad(loss, [model.linear.weight])
            assert float(g.norm()) <= float(x[i].norm()) + 1e-12 <= bound + 2e-12


def test_binary_logistic_is_the_logistic_loss_with_labels_plus_minus_one():
    model = BinaryLogistic(4).double()
    torch.nn.init.normal_(model.linear.weight)
    x, y = torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 2, (10,))
    z = x @ model.linear.weight[0]
    expected = torch.log1p(torch.exp(-(2 * y - 1) * z))
    torch.testing.assert_close(torch.nn.functional.cross_entropy(model(x), y, reduction="none"), expected)


@pytest.mark.parametrize("clipping", ["gradient", "input"])
def test_noisy_gd_step_is_clipped_sum_plus_noise_over_noisy_count(clipping):
    torch.manual_seed(3)
    x, y = torch.randn(30, 5, dtype=torch.float64) * 3, torch.randint(0, 2, (30,))
    model = BinaryLogistic(5).double()
    torch.nn.init.normal_(model.linear.weight)
    clipper = BookKeepingClipper(model)
    plan = TrainingPlan(
        algorithm=Algorithm.NOISY_GD,
        n_train=30,
        steps=3,
        lot_size=30,
        delta=1e-5,
        noise_multiplier=1.1,
        clip_norm=0.5,
        noise_phases=((1.0, 3),),
        clipping=clipping,
        count_epsilon=0.1,
    )
    if clipping == "gradient":
        expected = clipper.clipped_sum(x, y, 0.5).grads
    else:
        xc = clip_rows(x, 0.5)
        expected = list(
            torch.autograd.grad(torch.nn.functional.cross_entropy(model(xc), y, reduction="sum"), clipper.params)
        )
    noise = [torch.zeros_like(g).normal_(0.0, 1.1 * 0.5, generator=torch.Generator().manual_seed(9)) for g in expected]
    before = model.linear.weight.detach().clone()
    optimizer = torch.optim.SGD(clipper.params, lr=0.4)
    noisy_gd_step(
        step=1,
        clipper=clipper,
        optimizer=optimizer,
        x=x,
        y=y,
        plan=plan,
        denominator=31.5,
        physical_batch_size=None,
        noise_generator=torch.Generator().manual_seed(9),
    )
    torch.testing.assert_close(model.linear.weight.detach(), before - 0.4 * (expected[0] + noise[0]) / 31.5)


def test_noisy_count_is_laplace_with_scale_one_over_epsilon():
    generator = torch.Generator().manual_seed(4)
    epsilon, n = 0.5, 10_000
    draws = np.array([noisy_count(n, epsilon=epsilon, generator=generator) for _ in range(4000)]) - n
    assert stats.kstest(draws, stats.laplace(scale=1 / epsilon).cdf).pvalue > ALPHA


def test_noisy_gd_epsilon_is_the_composition_dp_accounting_gives(blobs_csv):
    spec = parse_spec(noisy_gd_spec(blobs_csv, noise_multiplier=5.0, count_epsilon=0.05))
    result = train(spec)
    assert result.steps == 20 and result.sampling_rate == 1.0
    expected = rdp_epsilon_of(
        [(dp_event.LaplaceDpEvent(noise_multiplier=1 / 0.05), 1), (dp_event.GaussianDpEvent(noise_multiplier=5.0), 20)],
        1e-5,
    )
    assert result.epsilons["rdp"] == pytest.approx(expected, rel=1e-9)
    assert result.test_accuracy > 0.8  # two well-separated blobs
    assert "noisy example count" in result.privacy_statement and "Poisson" not in result.privacy_statement


def test_noisy_gd_calibrates_sigma_for_the_whole_ledger(blobs_csv):
    spec = parse_spec(noisy_gd_spec(blobs_csv, target_epsilon=1.0, epochs=10, clipping="input"))
    plan = plan_run(spec, n_train=300)
    eps = rdp_epsilon_of(
        [
            (dp_event.LaplaceDpEvent(noise_multiplier=1 / 0.01), 1),
            (dp_event.GaussianDpEvent(noise_multiplier=plan.noise_multiplier), 10),
        ],
        1e-5,
    )
    assert eps <= 1.0 and eps == pytest.approx(1.0, rel=1e-3)


# ------------------------------------------------------------------ DP-PCA (Abadi et al. 2016)


def test_pca_projection_is_orthonormal_and_finds_the_dominant_directions():
    generator = torch.Generator().manual_seed(5)
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.normal(size=(20, 3)))[0]
    x = torch.as_tensor(rng.normal(size=(2000, 3)) @ basis.T * 5 + rng.normal(size=(2000, 20)) * 0.05)
    projection = pca_projection(normalize_rows(x), 3, noise_multiplier=4.0, generator=generator)
    torch.testing.assert_close(projection.T @ projection, torch.eye(3, dtype=projection.dtype), atol=1e-10, rtol=0)
    # The noisy subspace is close to the true one: principal angles' cosines near 1.
    cosines = np.linalg.svd(basis.T @ projection.numpy(), compute_uv=False)
    assert cosines.min() > 0.95


def test_pca_noise_is_symmetric_with_the_stated_scale():
    std, d = 3.0, 300
    noise = symmetric_gaussian(d, std, torch.Generator().manual_seed(6)).numpy()
    assert np.array_equal(noise, noise.T)
    upper = noise[np.triu_indices(d)]
    n = upper.size
    statistic = (n - 1) * upper.var(ddof=1) / std**2
    assert stats.chi2.ppf(ALPHA / 2, n - 1) < statistic < stats.chi2.isf(ALPHA / 2, n - 1)


def test_dp_pca_is_charged_up_front(digits):
    raw = fast_spec(model="mlp", hidden=[32], pca_dims=20, pca_noise=7.0, epochs=5, noise_multiplier=2.0)
    del raw["target_epsilon"]
    spec = parse_spec(raw)
    records = []
    result = train(spec, dataset=digits, on_step=records.append)
    steps = result.steps
    step = dp_event.PoissonSampledDpEvent(
        sampling_probability=64 / 1438, event=dp_event.GaussianDpEvent(noise_multiplier=2.0)
    )
    expected = rdp_epsilon_of([(dp_event.GaussianDpEvent(noise_multiplier=7.0), 1), (step, steps)], 1e-5)
    assert result.epsilons["rdp"] == pytest.approx(expected, rel=1e-9)
    assert records[0].epsilon > 0  # the projection is released before the first step
    assert "DP-PCA to 20 dimensions" in result.privacy_statement
    assert result.test_accuracy > 0.5


# ------------------------------------------------------------------ schedules and optimizers


def test_linear_learning_rate_schedule_as_abadi_et_al():
    schedule = Schedule(kind=ScheduleKind.LINEAR, end_factor=0.52, epochs=10)
    assert 0.1 * schedule.factor_at(0) == pytest.approx(0.1)
    assert 0.1 * schedule.factor_at(5) == pytest.approx(0.076)
    assert 0.1 * schedule.factor_at(10) == pytest.approx(0.052)
    assert 0.1 * schedule.factor_at(40) == pytest.approx(0.052)


def test_noise_schedule_becomes_ledger_phases_with_the_right_epsilon():
    raw = fast_spec(noise_multiplier=2.0, epochs=4, noise_schedule={"kind": "step", "factor": 0.5, "every_epochs": 2})
    del raw["target_epsilon"]
    spec = parse_spec(raw)
    plan = plan_run(spec, n_train=1438)
    assert [f for f, _ in plan.noise_phases] == [1.0, 0.5] and sum(n for _, n in plan.noise_phases) == plan.steps
    assert plan.noise_multiplier_at(1) == 2.0 and plan.noise_multiplier_at(plan.steps) == 1.0
    events = [
        (
            dp_event.PoissonSampledDpEvent(
                sampling_probability=64 / 1438, event=dp_event.GaussianDpEvent(noise_multiplier=2.0 * f)
            ),
            n,
        )
        for f, n in plan.noise_phases
    ]
    from engine.privacy import final_epsilon

    assert final_epsilon(plan.ledger(), delta=1e-5) == pytest.approx(rdp_epsilon_of(events, 1e-5), rel=1e-9)


def test_noise_schedule_must_be_piecewise_constant():
    from engine.training import SpecError

    with pytest.raises(SpecError, match=r"noise_schedule\.kind"):
        parse_spec(fast_spec(noise_schedule={"kind": "linear", "end_factor": 0.5, "epochs": 3}))


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_momentum_and_adam_train(digits, optimizer):
    lr = 0.05 if optimizer == "adam" else 0.5
    result = train(parse_spec(fast_spec(optimizer=optimizer, lr=lr, epochs=5)), dataset=digits)
    assert result.test_accuracy > 0.6 and result.epsilon <= 3.0


def test_every_algorithm_is_deterministic_for_a_fixed_seed(digits):
    specs = [
        fast_spec(epochs=2, clipping="per_layer", model="mlp", hidden=[16]),
        fast_spec(epochs=2, algorithm="nonprivate", lr=0.5) | {"target_epsilon": None},
    ]
    for raw in specs:
        raw = {k: v for k, v in raw.items() if v is not None}
        if raw["algorithm"] == "nonprivate":
            for key in ("delta", "clip_norm"):
                raw.pop(key)
        spec = parse_spec(raw)
        a, b = train(spec, dataset=digits), train(spec, dataset=digits)
        assert (a.test_accuracy, a.test_loss, a.epsilon) == (b.test_accuracy, b.test_loss, b.epsilon)


# ------------------------------------------------------------------ the non-private baseline


def test_nonprivate_baseline_has_no_epsilon_and_sees_every_example_each_epoch(digits):
    raw = {
        "dataset": "digits",
        "model": "logreg",
        "algorithm": "nonprivate",
        "lot_size": 64,
        "epochs": 5,
        "lr": 0.5,
        "seed": 0,
    }
    records = []
    result = train(parse_spec(raw), dataset=digits, on_step=records.append)
    assert result.epsilon is None and not result.private and result.epsilons == {}
    assert all(r.epsilon is None for r in records)
    assert "Not differentially private" in result.privacy_statement
    assert result.test_accuracy > 0.9
    batches = ShuffledBatches(10, 4, torch.Generator().manual_seed(0), torch.device("cpu"))
    epoch = torch.cat([batches.next() for _ in range(3)])
    assert sorted(epoch.tolist()) == list(range(10))


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        ({"algorithm": "nonprivate", "lot_size": 64, "delta": 1e-5}, "delta", "does not apply"),
        ({"algorithm": "noisy_gd", "lot_size": 64}, "lot_size", "does not apply"),
        ({"algorithm": "noisy_gd"}, "dataset", "two-class"),
        ({"clipping": "input"}, "clipping", "flat, per_layer"),
        ({"pca_dims": 10}, "pca_noise", "missing"),
        ({"pca_dims": 100, "pca_noise": 4}, "pca_dims", "[1, 64]"),
        ({"optimizer": "rmsprop"}, "optimizer", "sgd, momentum, adam"),
        ({"momentum": 0.9}, "momentum", "only applies"),
        ({"optimizer": "momentum", "momentum": 1.0}, "momentum", "[0, 1)"),
        ({"lr_schedule": {"kind": "step", "factor": 0.5}}, "lr_schedule.every_epochs", "(0, 1000]"),
        ({"lr_schedule": {"kind": "cosine"}}, "lr_schedule.kind", "constant, step, linear"),
        ({"model": "cnn"}, "model", "1×28×28"),
        ({"physical_batch_size": 0}, "physical_batch_size", "[1, "),
    ],
)
def test_algorithm_keys_are_validated(raw, field, fragment):
    from engine.training import SpecError

    spec = fast_spec()
    if raw.get("algorithm") in ("nonprivate",):
        for key in ("delta", "clip_norm", "target_epsilon"):
            spec.pop(key)
    if raw.get("algorithm") == "noisy_gd":
        spec.pop("lot_size")
    spec.update(raw)
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    assert info.value.field == field and fragment in str(info.value), str(info.value)


def test_canonical_form_fills_defaults():
    spec = parse_spec(fast_spec())
    explicit = parse_spec(fast_spec(optimizer="sgd", clipping="flat", lr_schedule={"kind": "constant"}))
    assert spec == explicit and spec.cache_key("v") == explicit.cache_key("v")
    assert parse_spec(spec.to_dict()) == spec


# ------------------------------------------------------------------ ScatterNet features and the CNN


def test_scatternet_features_are_per_example_and_cached(tmp_path):
    from engine.training.features import scatternet

    rng = np.random.default_rng(7)
    x = rng.random((5, 16 * 16)).astype(np.float32)
    alone = scatternet.scatter(x[2:3], (1, 16, 16))
    batch = scatternet.cached_scatter(x, (1, 16, 16), key="t", cache_dir=tmp_path)
    assert batch.shape == (5, 81 * 4 * 4)
    np.testing.assert_allclose(batch[2:3], alone, rtol=1e-5, atol=1e-6)  # no statistic across examples
    assert len(list((tmp_path / "features").glob("*.npy"))) == 1
    np.testing.assert_array_equal(scatternet.cached_scatter(x, (1, 16, 16), key="t", cache_dir=tmp_path), batch)


def test_cnn_accounting_matches_its_poisson_sampling():
    data = square_images()
    raw = fast_spec(dataset="mnist", model="cnn", noise_multiplier=1.0, lot_size=30, epochs=3, lr=0.5, delta=1e-5)
    del raw["target_epsilon"]
    spec = parse_spec(raw)
    plan = plan_run(spec, n_train=len(data.x_train))
    records = []
    result = train(spec, dataset=data, plan=plan, on_step=records.append)
    q = 30 / 120
    assert result.steps == 12 and result.sampling_rate == q
    step = dp_event.PoissonSampledDpEvent(sampling_probability=q, event=dp_event.GaussianDpEvent(noise_multiplier=1.0))
    assert result.epsilons["rdp"] == pytest.approx(rdp_epsilon_of([(step, 12)], 1e-5), rel=1e-9)
    # Realized lots: Binomial(120, q) each; their total over 12 steps is Binomial(1440, q).
    total = sum(r.lot_size for r in records[1:])
    assert stats.binom.cdf(total, 1440, q) > ALPHA / 2 and stats.binom.sf(total - 1, 1440, q) > ALPHA / 2
    assert result.test_accuracy > 0.7

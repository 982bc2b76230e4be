"""Anisotropic DP-SGD (Xiang et al.): weighted clipping, noise N(0, σ²C²W²), weights from releases only.

Statistical tests use fixed seeds (reproducible) and thresholds with a stated false-failure rate: the
probability that a correct implementation fails on a fresh seed (ALPHA per test).
"""

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from engine.training import parse_spec, pick_device, train
from engine.training.algorithms import aniso as aniso_module
from engine.training.algorithms.aniso import (
    AnisoDPSGD,
    ReleasedGradientWeights,
    WeightLayout,
    add_weighted_noise,
    aniso_dpsgd_step,
)
from engine.training.algorithms.aniso_weights import sensitivity_estimate, weights_from_sensitivity
from engine.training.algorithms.registry import StepContext, make_step
from engine.training.clipping import BookKeepingClipper, MaterializedClipper
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.models.architectures import build_model
from engine.training.noise import random_streams
from engine.training.run_setup import build_run_model
from tests.helpers import fast_spec

ALPHA = 1e-6  # false-failure rate of each statistical test below


def make_plan(**overrides) -> TrainingPlan:
    values = dict(
        algorithm=Algorithm.ANISO_DPSGD,
        n_train=40,
        lot_size=40,
        noise_multiplier=1.3,
        clip_norm=0.7,
        steps=50,
        delta=1e-5,
        noise_phases=((1.0, 50),),
    )
    values.update(overrides)
    return TrainingPlan(**values)


def small_conv_net() -> nn.Sequential:
    """Conv + linear layers on 1×6×6 inputs: the book-keeping clipper's conv path too."""
    return nn.Sequential(nn.Unflatten(1, (1, 6, 6)), nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(48, 4))


def models() -> dict[str, tuple[nn.Module, int, int]]:
    """name → (model in float64, n_features, n_classes)."""
    torch.manual_seed(0)
    return {
        "mlp": (build_model("mlp", n_features=6, n_classes=3, hidden=(5, 4)).double(), 6, 3),
        "conv": (small_conv_net().double(), 36, 4),
    }


def random_weights(aniso: AnisoDPSGD, seed: int) -> None:
    """Set W to arbitrary weights in [0.2, 5] (the clipping must hold whatever W is)."""
    generator = torch.Generator().manual_seed(seed)
    groups = aniso.weights.group_weights
    aniso.weights.group_weights = (0.2 + 4.8 * torch.rand(groups.shape, generator=generator, dtype=torch.float64)).to(
        groups.device
    )


def per_example_grads(model: nn.Module, x, y) -> list[list[torch.Tensor]]:
    """The definition: one backward per example."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        list(torch.autograd.grad(F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]), params)) for i in range(len(x))
    ]


def weighted_norm(grads: list[torch.Tensor], weights: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float((g / w).square().sum()) for g, w in zip(grads, weights, strict=True)))


# book-keeping per layer: ghost norms / W; per coordinate: the quadratic form (linear layers) or torch.func
# (conv); the MaterializedClipper: torch.func for both
CLIPPERS = [
    ("layer", BookKeepingClipper),
    ("layer", MaterializedClipper),
    ("coordinate", BookKeepingClipper),
    ("coordinate", MaterializedClipper),
]


# ------------------------------------------------------------------------------ weighted clipping


@pytest.mark.parametrize("model_name", ["mlp", "conv"])
@pytest.mark.parametrize(("granularity", "clipper_type"), CLIPPERS)
def test_weighted_clipping_bounds_every_example(model_name, granularity, clipper_type):
    model, n_features, n_classes = models()[model_name]
    torch.manual_seed(1)
    x, y = 3 * torch.randn(12, n_features, dtype=torch.float64), torch.randint(0, n_classes, (12,))
    aniso = AnisoDPSGD(clipper_type(model), granularity=granularity)
    random_weights(aniso, seed=2)
    weights = aniso.weights.per_param(torch.float64)
    clip_norm = 0.3
    grads = per_example_grads(model, x, y)
    norms = [weighted_norm(g, weights) for g in grads]
    assert sum(n > clip_norm for n in norms) >= 6, "most examples must be clipped for the test to bite"
    expected = [torch.zeros_like(p) for p in aniso.params]
    for i, g_i in enumerate(grads):
        alone = aniso.clipper.clipped_sum(x[i : i + 1], y[i : i + 1], clip_norm)
        bound = weighted_norm(alone.grads, weights)
        assert bound <= clip_norm * (1 + 1e-5), f"example {i}: ‖W⁻¹ clip(g)‖ = {bound} > C = {clip_norm}"
        assert alone.norms[0].item() == pytest.approx(norms[i], rel=1e-9)
        factor = min(1.0, clip_norm / norms[i])
        for e, g in zip(expected, g_i, strict=True):
            e += factor * g
        for got, g in zip(alone.grads, g_i, strict=True):
            torch.testing.assert_close(got, factor * g, rtol=1e-9, atol=1e-12)
    whole = aniso.clipper.clipped_sum(x, y, clip_norm)
    for got, want in zip(whole.grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    assert whole.clipped.tolist() == [n > clip_norm for n in norms]


@pytest.mark.parametrize(("granularity", "clipper_type"), CLIPPERS)
def test_gradients_inside_the_weighted_region_are_untouched(granularity, clipper_type):
    model, n_features, n_classes = models()["mlp"]
    torch.manual_seed(3)
    x, y = torch.randn(10, n_features, dtype=torch.float64), torch.randint(0, n_classes, (10,))
    aniso = AnisoDPSGD(clipper_type(model), granularity=granularity)
    random_weights(aniso, seed=4)
    grads = per_example_grads(model, x, y)
    largest = max(weighted_norm(g, aniso.weights.per_param(torch.float64)) for g in grads)
    result = aniso.clipper.clipped_sum(x, y, largest * 1.01)
    assert not result.clipped.any()
    for k, got in enumerate(result.grads):
        torch.testing.assert_close(got, sum(g[k] for g in grads), rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------ noise


def assert_standard_normal(sample: np.ndarray) -> None:
    """Variance 1 (chi-square interval) and mean 0 (normal interval), each at false-failure rate ALPHA/2."""
    n = sample.size
    statistic = (n - 1) * sample.var(ddof=1)
    assert stats.chi2.ppf(ALPHA / 4, n - 1) < statistic < stats.chi2.isf(ALPHA / 4, n - 1), f"var {sample.var()}"
    assert abs(sample.mean()) < stats.norm.isf(ALPHA / 4) / np.sqrt(n)


def test_noise_has_covariance_sigma_c_w_squared():
    """Per coordinate σC·wⱼ·zⱼ: each weight class of the noise, divided by σC·w, is standard normal."""
    std, n = 1.7, 50_000
    values = torch.tensor([0.1, 0.5, 2.0, 10.0], dtype=torch.float64)
    coordinate_weights = values.repeat_interleave(n).reshape(4, n)  # one parameter, four weights
    layer_weight = torch.tensor(3.0, dtype=torch.float64)  # another parameter, one weight
    grads = [torch.zeros(4, n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)]
    noisy = add_weighted_noise(grads, [coordinate_weights, layer_weight], std, torch.Generator().manual_seed(8))
    for row, w in zip(noisy[0], values, strict=True):
        assert_standard_normal((row / (std * w)).numpy())
    assert_standard_normal((noisy[1] / (std * layer_weight)).numpy())
    # independent across weight classes (no reuse of draws): correlation of two classes' standardized noise
    a, b = (noisy[0][0] / values[0]).numpy(), (noisy[0][1] / values[1]).numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < stats.norm.isf(ALPHA / 2) / np.sqrt(n)


@pytest.mark.parametrize("granularity", ["layer", "coordinate"])
def test_update_of_an_empty_lot_is_noise_with_std_sigma_c_w_over_l(granularity):
    torch.manual_seed(0)
    model = build_model("mlp", n_features=300, n_classes=10, hidden=(100,)).double()
    aniso = AnisoDPSGD(BookKeepingClipper(model), granularity=granularity, warmup=10**9)  # W stays as set
    random_weights(aniso, seed=5)
    weights = aniso.weights.per_param(torch.float64)
    plan = make_plan(n_train=10**9, lot_size=3, noise_multiplier=2.0, clip_norm=3.0)  # q = 3e-9: empty lots
    before = [p.detach().clone() for p in aniso.params]
    stats_ = aniso_dpsgd_step(
        step=1,
        aniso=aniso,
        optimizer=torch.optim.SGD(aniso.params, lr=1.0),
        physical_batch_size=None,
        x=torch.randn(3, 300, dtype=torch.float64),
        y=torch.zeros(3, dtype=torch.long),
        plan=plan,
        sampling_generator=torch.Generator().manual_seed(2),
        noise_generator=torch.Generator().manual_seed(3),
    )
    assert stats_.lot_size == 0 and stats_.clipped_fraction is None
    standardized = [
        ((p0 - p.detach()) * plan.lot_size / (plan.noise_std * w.expand_as(p))).flatten()
        for p, p0, w in zip(aniso.params, before, weights, strict=True)
    ]
    assert_standard_normal(torch.cat(standardized).numpy())


# ------------------------------------------------------------------------------ the weights


def test_weights_have_geometric_mean_one_and_stay_within_the_ratio():
    generator = torch.Generator().manual_seed(6)
    sizes = torch.randint(1, 1000, (40,), generator=generator).double()
    for spread, ratio in ((1.0, 10.0), (8.0, 10.0), (20.0, 3.0), (3.0, 1000.0)):
        sensitivity = torch.exp(spread * torch.randn(40, generator=generator, dtype=torch.float64))
        w = weights_from_sensitivity(sensitivity, sizes, ratio)
        assert (sizes * w.log()).sum().item() == pytest.approx(0.0, abs=1e-9 * sizes.sum().item())
        assert w.min().item() >= 1 / ratio * (1 - 1e-12) and w.max().item() <= ratio * (1 + 1e-12)
        order = torch.argsort(sensitivity)  # more released signal → a smaller weight (less noise)
        assert (w[order].diff() <= 1e-12).all()
    # unclamped, w ∝ s^(−1/2) exactly
    sensitivity = torch.tensor([1.0, 4.0, 16.0], dtype=torch.float64)
    w = weights_from_sensitivity(sensitivity, torch.ones(3, dtype=torch.float64), 100.0)
    torch.testing.assert_close(w, torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64))
    assert torch.equal(weights_from_sensitivity(sensitivity, torch.ones(3, dtype=torch.float64), 1.0), torch.ones(3))


def test_the_weight_rule_takes_only_released_tensors_and_public_numbers():
    """By construction: `observe` (the only input of the rule) takes a release and σC, L of its step."""
    assert list(inspect.signature(ReleasedGradientWeights.observe).parameters) == [
        "self",
        "released",
        "noise_std",
        "lot_size",
    ]
    assert list(inspect.signature(sensitivity_estimate).parameters) == [
        "mean_square",
        "noise_variance",
        "sizes",
        "smoothing",
    ]


@pytest.mark.parametrize("granularity", ["layer", "coordinate"])
def test_neighbouring_data_with_the_same_released_history_gets_the_same_weights(granularity, monkeypatch):
    """Train on x; then on x with one example changed, forcing every release to be the one seen on x
    (as a noise draw could make it). The weights must then be the same: nothing un-noised reaches them."""
    torch.manual_seed(0)
    x, y = torch.randn(40, 6, dtype=torch.float64), torch.randint(0, 3, (40,))
    neighbour = x.clone()
    neighbour[7] = 50.0  # a very different example, in every lot (q = 1)
    plan = make_plan(lot_size=40, steps=20, noise_phases=((1.0, 20),))

    def run(data, releases: list | None):
        torch.manual_seed(1)
        model = build_model("mlp", n_features=6, n_classes=3, hidden=(5,)).double()
        aniso = AnisoDPSGD(BookKeepingClipper(model), granularity=granularity, warmup=3)
        optimizer = torch.optim.SGD(aniso.params, lr=0.1)
        seen, history = [], []
        real_noise = aniso_module.add_weighted_noise

        def noise(grads, weights, std, generator):
            if releases is None:
                return real_noise(grads, weights, std, generator)
            return [r * plan.lot_size for r in releases[len(seen)]]  # the release (÷ L) is the recorded one

        monkeypatch.setattr(aniso_module, "add_weighted_noise", noise)
        for step in range(1, 21):
            aniso_dpsgd_step(
                step=step,
                aniso=aniso,
                optimizer=optimizer,
                x=data,
                y=y,
                plan=plan,
                physical_batch_size=None,
                sampling_generator=torch.Generator().manual_seed(step),
                noise_generator=torch.Generator().manual_seed(100 + step),
            )
            seen.append([p.grad.clone() for p in aniso.params])
            history.append(aniso.weights.group_weights.clone())
        return seen, history

    releases, weights_x = run(x, None)
    assert not torch.allclose(weights_x[-1], torch.ones_like(weights_x[-1])), "the weights must have moved"
    _, weights_neighbour = run(neighbour, releases)
    for a, b in zip(weights_x, weights_neighbour, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=0)
    # and the same weights again from the releases alone, without any data
    replay = ReleasedGradientWeights(
        AnisoDPSGD(
            BookKeepingClipper(build_model("mlp", n_features=6, n_classes=3, hidden=(5,)).double()),
            granularity=granularity,
        ).weights.layout,
        warmup=3,
    )
    for release, expected in zip(releases, weights_x, strict=True):
        replay.observe(release, noise_std=plan.noise_std, lot_size=plan.lot_size)
        torch.testing.assert_close(replay.group_weights, expected, rtol=1e-12, atol=0)


def test_the_weight_is_larger_where_the_released_signal_is_smaller():
    """Two layers: one whose releases carry a steady signal, one pure noise (ALPHA: the signal layer's
    estimate is 40 noise standard errors above the other's, so the order is never wrong in practice)."""
    model = build_model("mlp", n_features=20, n_classes=2, hidden=(50,))  # layers of 1050 and 102 coordinates
    layout = AnisoDPSGD(BookKeepingClipper(model), granularity="layer").weights.layout
    rule = ReleasedGradientWeights(layout, smoothing=0.9, max_ratio=10.0, warmup=5)
    generator = torch.Generator().manual_seed(9)
    noise_std, lot = 2.0, 100  # noise of ĝ: std 0.02 per coordinate
    for _ in range(30):
        released = [0.02 * torch.randn(p.shape, generator=generator) for p in model.parameters()]
        released[2] += 0.05  # the second layer's weight gets a signal 2.5× the noise std
        rule.observe(released, noise_std=noise_std, lot_size=lot)
    w = rule.group_weights
    assert w[1] < 1 < w[0]
    assert (layout.sizes() * w.log()).sum().abs() < 1e-9


# ------------------------------------------------------------------------------ against DP-SGD


def run_steps(spec: dict, steps: int, data, *, streams_of: dict | None = None) -> list[torch.Tensor]:
    """`steps` steps of `spec`, drawing lots and noise from the streams of `streams_of` (default: its own), so
    that two algorithms can be compared on the same draws."""
    parsed = parse_spec(spec)
    streams = random_streams(parse_spec(streams_of or spec), torch.device("cpu"))
    from engine.training.config.plan import plan_run

    plan = plan_run(parsed, n_train=len(data.x_train))
    x, y = torch.as_tensor(data.x_train), torch.as_tensor(data.y_train)
    torch.manual_seed(parsed.seed)
    model = build_run_model(parsed, n_features=x.shape[1], n_classes=data.n_classes, image_shape=data.image_shape)
    optimizer = torch.optim.SGD(model.parameters(), lr=parsed.lr)
    step = make_step(StepContext(spec=parsed, plan=plan, model=model, optimizer=optimizer, x=x, y=y, streams=streams))
    for t in range(1, steps + 1):
        step(t)
    return [p.detach().clone() for p in model.parameters()]


def test_with_weights_one_a_step_is_dpsgd_exactly(digits):
    """Logistic regression has one layer: its layer weight is always 1, and the run is DP-SGD's bit for bit (on the
    same lots and noise: each spec has its own streams, so the aniso runs draw from the DP-SGD spec's)."""
    spec = fast_spec(algorithm="aniso_dpsgd")
    iso = run_steps(fast_spec(), 15, digits)
    assert all(torch.equal(a, b) for a, b in zip(run_steps(spec, 15, digits, streams_of=fast_spec()), iso, strict=True))
    # an MLP with r = 1 (all weights 1), past the warm-up; and per coordinate during the warm-up (W = 1 there)
    mlp = dict(model="mlp", hidden=[16], lr=0.5)
    iso = run_steps(fast_spec(**mlp), 15, digits)
    same = run_steps(
        fast_spec(**mlp, algorithm="aniso_dpsgd", aniso_max_ratio=1.0), 15, digits, streams_of=fast_spec(**mlp)
    )
    assert all(torch.equal(a, b) for a, b in zip(same, iso, strict=True))
    coordinate = run_steps(
        fast_spec(**mlp, algorithm="aniso_dpsgd", aniso_granularity="coordinate"),
        10,
        digits,
        streams_of=fast_spec(**mlp),
    )
    for a, b in zip(coordinate, run_steps(fast_spec(**mlp), 10, digits), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # torch.func vs ghost norms: rounding only
    moved = run_steps(fast_spec(**mlp, algorithm="aniso_dpsgd"), 15, digits, streams_of=fast_spec(**mlp))
    assert not all(torch.equal(a, b) for a, b in zip(moved, iso, strict=True)), "past the warm-up W ≠ 1"


def test_physical_batches_do_not_change_the_step():
    torch.manual_seed(0)
    x, y = torch.randn(40, 6, dtype=torch.float64), torch.randint(0, 3, (40,))
    results = []
    for physical in (None, 7):
        torch.manual_seed(1)
        model = build_model("mlp", n_features=6, n_classes=3, hidden=(5,)).double()
        aniso = AnisoDPSGD(BookKeepingClipper(model), granularity="coordinate", warmup=2)
        optimizer = torch.optim.SGD(aniso.params, lr=0.1)
        streams = dict(
            sampling_generator=torch.Generator().manual_seed(2), noise_generator=torch.Generator().manual_seed(3)
        )
        for step in range(1, 6):
            aniso_dpsgd_step(
                step=step,
                aniso=aniso,
                optimizer=optimizer,
                x=x,
                y=y,
                plan=make_plan(lot_size=20),
                physical_batch_size=physical,
                **streams,
            )
        results.append([p.detach() for p in aniso.params])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("granularity", ["layer", "coordinate"])
def test_a_digits_run_meets_its_budget_and_learns(digits, granularity):
    spec = fast_spec(
        algorithm="aniso_dpsgd", model="mlp", hidden=[32], lr=0.5, epochs=10, aniso_granularity=granularity
    )
    result = train(parse_spec(spec), dataset=digits)
    assert result.epsilon <= 3.0
    assert result.test_accuracy > 0.7  # chance: 0.1
    assert "anisotropic DP-SGD" in result.privacy_statement


def test_the_issue_example_runs_end_to_end(digits):
    result = train(parse_spec(fast_spec(algorithm="aniso_dpsgd")), dataset=digits)
    assert result.epsilon <= 3.0 and result.steps == 450
    assert result.test_accuracy > 0.85


@pytest.mark.parametrize("granularity", ["layer", "coordinate"])
def test_a_step_runs_on_the_machines_device_and_stays_there(granularity):
    """CUDA where there is one (the GPU path), else the CPU: every tensor of the step stays on that device."""
    device = pick_device()
    torch.manual_seed(0)
    model = build_model("mlp", n_features=6, n_classes=3, hidden=(5,)).to(device)
    aniso = AnisoDPSGD(BookKeepingClipper(model), granularity=granularity, warmup=2)
    x, y = torch.randn(40, 6, device=device), torch.randint(0, 3, (40,), device=device)
    optimizer = torch.optim.SGD(aniso.params, lr=0.1)
    for step in range(1, 6):
        stats_ = aniso_dpsgd_step(
            step=step,
            aniso=aniso,
            optimizer=optimizer,
            x=x,
            y=y,
            plan=make_plan(lot_size=20),
            physical_batch_size=None,
            sampling_generator=torch.Generator(device).manual_seed(1),
            noise_generator=torch.Generator(device).manual_seed(2),
        )
    assert aniso.weights.group_weights.device.type == device.type
    assert stats_.lot_size > 0 and all(torch.isfinite(p).all() for p in aniso.params)


def test_layout_of_layers_and_coordinates():
    model = build_model("mlp", n_features=4, n_classes=2, hidden=(3,))
    by_layer = AnisoDPSGD(BookKeepingClipper(model), granularity="layer").weights.layout
    assert by_layer.groups == 2 and by_layer.sizes().tolist() == [15.0, 8.0]
    by_coordinate = AnisoDPSGD(MaterializedClipper(model), granularity="coordinate").weights.layout
    assert by_coordinate.groups == 23
    assert isinstance(by_layer, WeightLayout)
    with pytest.raises(ValueError, match="granularity"):
        AnisoDPSGD(BookKeepingClipper(model), granularity="tensor")

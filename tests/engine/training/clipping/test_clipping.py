"""Per-example clipping: book-keeping (ghost norms, linear and conv) and torch.func equal a per-example loop."""

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.training.clipping import (
    BatchNormError,
    BookKeepingClipper,
    MaterializedClipper,
    UnsupportedModelError,
    clip_factors,
    conv_norm_method,
    make_clipper,
    per_layer_thresholds,
)
from engine.training.models.architectures import build_model


def layer_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Trainable parameters by the module that owns them directly ("1.weight" → layer "1")."""
    groups: dict[str, list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault(name.rpartition(".")[0], []).append(p)
    return groups


def loop_clipped_sum(model: nn.Module, x, y, clip_norm):
    """The definition: one backward per example, clip its gradient, add them up.

    `clip_norm` is a float (flat clipping) or one threshold per layer (each layer's part of the
    gradient clipped on its own). Returns (clipped sum, per-example norms, per-example clipped flags)."""
    groups = layer_groups(model)
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    norms, flags = [], []
    for i in range(len(x)):
        loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        grads = dict(zip(map(id, params), torch.autograd.grad(loss, params), strict=True))
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
        norms.append(norm)
        if isinstance(clip_norm, float):
            factors = dict.fromkeys(grads, min(1.0, clip_norm / max(norm.item(), 1e-300)))
            flags.append(norm.item() > clip_norm)
        else:
            factors, clipped = {}, False
            for threshold, layer in zip(clip_norm, groups.values(), strict=True):
                layer_norm = math.sqrt(sum(grads[id(p)].pow(2).sum().item() for p in layer))
                factors.update(dict.fromkeys(map(id, layer), min(1.0, threshold / max(layer_norm, 1e-300))))
                clipped |= layer_norm > threshold
            flags.append(clipped)
        for t, p in zip(total, params, strict=True):
            t += factors[id(p)] * grads[id(p)]
    return total, torch.stack(norms), torch.tensor(flags, dtype=torch.bool)


def all_clippers(model: nn.Module):
    yield "bookkeeping", BookKeepingClipper(model)
    if any(isinstance(m, nn.Conv2d) for m in model.modules()):
        yield "bookkeeping-ghost", BookKeepingClipper(model, conv_norms="ghost")
        yield "bookkeeping-materialize", BookKeepingClipper(model, conv_norms="materialize")
    yield "materialized", MaterializedClipper(model)


def assert_equals_loop(model: nn.Module, x, y, clip_norm, clippers=None) -> None:
    expected, expected_norms, expected_flags = loop_clipped_sum(model, x, y, clip_norm)
    expected_loss = F.cross_entropy(model(x), y, reduction="sum").item()
    for label, clipper in clippers or all_clippers(model):
        result = clipper.clipped_sum(x, y, clip_norm)
        torch.testing.assert_close(result.norms, expected_norms, rtol=1e-10, atol=1e-12, msg=label)
        assert torch.equal(result.clipped, expected_flags), label
        for got, want in zip(result.grads, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=label)
        assert result.loss_sum.item() == pytest.approx(expected_loss), label


def median_norm(model: nn.Module, x, y) -> float:
    """A threshold that clips about half of the examples, halfway between two norms (no ties)."""
    norms = loop_clipped_sum(model, x, y, 1e300)[1].sort().values
    return float(norms[len(norms) // 2 - 1 : len(norms) // 2 + 1].mean())


@pytest.mark.parametrize(("model_name", "hidden"), [("logreg", ()), ("mlp", (32,)), ("mlp", (16, 8))])
@pytest.mark.parametrize("clip_norm", [0.05, 1.0, 100.0])
def test_bookkeeping_equals_per_example_loop(model_name, hidden, clip_norm):
    torch.manual_seed(0)
    model = build_model(model_name, n_features=12, n_classes=5, hidden=hidden).double()
    x = torch.randn(23, 12, dtype=torch.float64) * 3
    y = torch.randint(0, 5, (23,))
    assert_equals_loop(model, x, y, clip_norm)


CONV_VARIANTS = {
    "plain": dict(kernel_size=3),
    "stride2-pad1-nobias": dict(kernel_size=3, stride=2, padding=1, bias=False),
    "rect-stride-pad-dilation": dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
    "same-dilated": dict(kernel_size=(3, 2), padding="same", dilation=(1, 2)),
    "valid-1x1": dict(kernel_size=1, padding="valid"),
    "reflect-stride2": dict(kernel_size=3, stride=2, padding=1, padding_mode="reflect"),
    "circular-nobias": dict(kernel_size=2, padding=(1, 0), padding_mode="circular", bias=False),
}


@pytest.mark.parametrize("variant", sorted(CONV_VARIANTS))
def test_conv2d_equals_per_example_loop(variant):
    torch.manual_seed(2)
    image = (2, 7, 6)
    conv = nn.Conv2d(image[0], 3, **CONV_VARIANTS[variant])
    with torch.no_grad():
        out_features = conv(torch.zeros(1, *image)).numel()
    model = nn.Sequential(nn.Unflatten(1, image), conv, nn.Tanh(), nn.Flatten(), nn.Linear(out_features, 4)).double()
    x = torch.randn(9, math.prod(image), dtype=torch.float64)
    y = torch.randint(0, 4, (9,))
    for clip_norm in (median_norm(model, x, y), 1e6):
        assert_equals_loop(model, x, y, clip_norm)


def test_conv_alone_and_frozen_layers():
    """Only the conv trains (its input is the model input); then only the linear layer after it."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Unflatten(1, (1, 6, 6)), nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(32, 3)).double()
    x, y = torch.randn(7, 36, dtype=torch.float64), torch.randint(0, 3, (7,))
    for frozen in ("3", "1"):
        for name, p in model.named_parameters():
            p.requires_grad_(not name.startswith(frozen))
        assert_equals_loop(model, x, y, median_norm(model, x, y))


@pytest.mark.parametrize(("image_shape", "batch"), [((1, 28, 28), 5), ((3, 32, 32), 3)])
def test_cnn_equals_per_example_loop(image_shape, batch):
    torch.manual_seed(4)
    n = math.prod(image_shape)
    model = build_model("cnn", n_features=n, n_classes=10, image_shape=image_shape).double()
    x = torch.rand(batch, n, dtype=torch.float64)
    y = torch.randint(0, 10, (batch,))
    assert_equals_loop(model, x, y, median_norm(model, x, y))


class Residual(nn.Module):
    """Logits that are no layer's output: a sum of two branches, one through a conv."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.head = nn.Linear(32, 3)
        self.skip = nn.Linear(16, 3, bias=False)

    def forward(self, x):
        h = torch.tanh(self.conv(x.view(-1, 1, 4, 4))).flatten(1)
        return self.head(h) + self.skip(x)


@pytest.mark.parametrize("case", ["output-after-last-layer", "residual", "bias-only-logreg"])
def test_models_whose_logits_are_not_the_last_layer_output(case):
    torch.manual_seed(10)
    if case == "output-after-last-layer":
        model = nn.Sequential(nn.Linear(16, 5), nn.ReLU(), nn.Linear(5, 3), nn.Tanh())
    elif case == "residual":
        model = Residual()
    else:
        model = nn.Sequential(nn.Linear(16, 3))
        model[0].weight.requires_grad_(False)
    model = model.double()
    x, y = torch.randn(8, 16, dtype=torch.float64), torch.randint(0, 3, (8,))
    assert_equals_loop(model, x, y, median_norm(model, x, y))


def test_scratch_buffers_are_reused_across_lot_sizes():
    """Poisson lots change size every step; the conv scratch space must not leak between calls."""
    torch.manual_seed(11)
    model = build_model("cnn", n_features=784, n_classes=10, image_shape=(1, 28, 28)).double()
    x, y = torch.rand(7, 784, dtype=torch.float64), torch.randint(0, 10, (7,))
    clippers = [*all_clippers(model), ("bookkeeping-kept", BookKeepingClipper(model, keep_workspace=True))]
    for rows in (slice(0, 3), slice(0, 7), slice(2, 4)):
        assert_equals_loop(model, x[rows], y[rows], 0.05, clippers=clippers)
    assert clippers[-1][1]._workspace  # kept for the next call
    assert not BookKeepingClipper(model)._workspace
    default = BookKeepingClipper(model)
    default.clipped_sum(x, y, 0.05)
    assert not default._workspace  # by default nothing but the result outlives the call


def test_cnn_conv_norm_choice_by_cost():
    """First layer on MNIST: P = 196 positions, D = 64, 16 filters → materialize (P·D·C_out ≪ P²·(D+C_out));
    second: P = 25, D = 256, 32 filters → ghost norm."""
    model = build_model("cnn", n_features=784, n_classes=10, image_shape=(1, 28, 28))
    assert conv_norm_method(model[1], 14 * 14) == "materialize"
    assert conv_norm_method(model[4], 5 * 5) == "ghost"
    with pytest.raises(ValueError, match="conv_norms"):
        BookKeepingClipper(model, conv_norms="fast")


def test_per_layer_clipping_equals_loop_that_clips_each_layer():
    torch.manual_seed(5)
    mlp = build_model("mlp", n_features=10, n_classes=4, hidden=(8, 6)).double()
    x, y = torch.randn(11, 10, dtype=torch.float64) * 2, torch.randint(0, 4, (11,))
    assert_equals_loop(mlp, x, y, (0.3, 0.05, 0.2))
    assert_equals_loop(mlp, x, y, per_layer_thresholds(0.4, 3))

    cnn = build_model("cnn", n_features=784, n_classes=10, image_shape=(1, 28, 28)).double()
    x, y = torch.rand(4, 784, dtype=torch.float64), torch.randint(0, 10, (4,))
    assert_equals_loop(cnn, x, y, per_layer_thresholds(median_norm(cnn, x, y), 4))


def test_per_layer_contributions_are_bounded():
    """Each example's clipped contribution of layer k has norm ≤ C_k, so the whole one has ≤ √Σ C_k²."""
    torch.manual_seed(6)
    model = build_model("cnn", n_features=784, n_classes=10, image_shape=(1, 28, 28))
    thresholds = (0.01, 0.02, 0.03, 0.04)
    x, y = torch.rand(4, 784) * 5, torch.randint(0, 10, (4,))
    for label, clipper in all_clippers(model):
        assert clipper.layer_names == ["1", "4", "8", "10"], label
        for i in range(len(x)):
            result = clipper.clipped_sum(x[i : i + 1], y[i : i + 1], thresholds)
            assert bool(result.clipped[0]), label
            by_param = dict(zip(map(id, clipper.params), result.grads, strict=True))
            for threshold, layer in zip(thresholds, layer_groups(model).values(), strict=True):
                norm = math.sqrt(sum(float(by_param[id(p)].double().pow(2).sum()) for p in layer))
                assert norm <= threshold * (1 + 1e-5), label
                assert norm == pytest.approx(threshold, rel=1e-4), label


def test_per_layer_thresholds_split_the_budget():
    for clip_norm, k in [(1.0, 1), (1.0, 4), (0.7, 3), (3.3, 7), (1e-3, 10)]:
        thresholds = per_layer_thresholds(clip_norm, k)
        assert len(thresholds) == k and len(set(thresholds)) == 1
        assert sum(Fraction(t) ** 2 for t in thresholds) <= Fraction(clip_norm) ** 2  # exactly, not just in floats
        assert math.sqrt(sum(t * t for t in thresholds)) == pytest.approx(clip_norm, rel=1e-12)
    model = build_model("mlp", n_features=4, n_classes=3, hidden=(5,))
    with pytest.raises(ValueError, match="2 thresholds"):
        BookKeepingClipper(model).clipped_sum(torch.randn(2, 4), torch.tensor([0, 1]), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        MaterializedClipper(model).clipped_sum(torch.randn(2, 4), torch.tensor([0, 1]), (1.0, 0.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("clip_norm", [0.7, 1.0, 3.3, 1 / 3, 1e-3])
def test_clip_factors_never_exceed_the_threshold(dtype, clip_norm):
    """cᵢ·‖gᵢ‖ ≤ C holds in floating point (a plain C/‖gᵢ‖ overshoots for about one norm in eight)."""
    torch.manual_seed(7)
    c = torch.tensor(clip_norm, dtype=dtype)
    near = c * (1 + torch.linspace(-1e-5, 1e-5, 2001, dtype=torch.float64).to(dtype))
    norms = torch.cat([torch.rand(20000, dtype=dtype) * 10 * clip_norm, near, torch.zeros(1, dtype=dtype), c[None]])
    factors = clip_factors(norms, clip_norm)
    assert bool(((factors * norms).double() <= clip_norm).all())  # the product as computed, against the exact C
    assert bool((factors <= 1).all()) and bool((factors[norms <= clip_norm * (1 - 1e-5)] == 1).all())
    exact = torch.clamp(clip_norm / norms.double(), max=1.0)
    torch.testing.assert_close(factors.double(), exact, rtol=8 * torch.finfo(dtype).eps, atol=0)
    layer_norms = torch.stack([norms, norms * (2.1 / clip_norm)], dim=1)
    products = (clip_factors(layer_norms, (clip_norm, 2.1)) * layer_norms).double()
    assert bool((products <= torch.tensor([clip_norm, 2.1], dtype=torch.float64)).all())


def test_each_example_contributes_at_most_clip_norm():
    torch.manual_seed(1)
    model = build_model("mlp", n_features=8, n_classes=3, hidden=(16,))
    clipper = BookKeepingClipper(model)
    x, y = torch.randn(1, 8) * 50, torch.tensor([2])
    result = clipper.clipped_sum(x, y, 0.5)
    assert float(result.norms[0]) > 0.5 and bool(result.clipped[0])
    total = torch.sqrt(sum(g.pow(2).sum() for g in result.grads))
    assert float(total) == pytest.approx(0.5, rel=1e-5)


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_empty_lot_gives_zero_gradients(model_name):
    model = build_model(model_name, n_features=784, n_classes=3, hidden=(5,), image_shape=(1, 28, 28))
    for clipper in (BookKeepingClipper(model), MaterializedClipper(model)):
        result = clipper.clipped_sum(torch.zeros(0, 784), torch.zeros(0, dtype=torch.long), 1.0)
        assert all(float(g.abs().sum()) == 0.0 for g in result.grads)
        assert [g.shape for g in result.grads] == [p.shape for p in model.parameters()]
        assert result.norms.shape == result.clipped.shape == (0,)


def test_frozen_model_gives_zero_gradients():
    model = build_model("mlp", n_features=6, n_classes=3, hidden=(4,))
    model.requires_grad_(False)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    for clipper in (BookKeepingClipper(model), MaterializedClipper(model)):
        assert clipper.params == [] and clipper.layer_names == []
        result = clipper.clipped_sum(x, y, 1.0)
        assert result.grads == [] and result.norms.shape == (5,) and not bool(result.clipped.any())
        assert float(result.loss_sum) == pytest.approx(float(F.cross_entropy(model(x), y, reduction="sum")))


def test_parameter_free_layers_are_supported():
    torch.manual_seed(8)
    model = nn.Sequential(
        nn.Unflatten(1, (2, 6, 6)),
        nn.Conv2d(2, 4, 3, padding=1),
        nn.GroupNorm(2, 4, affine=False),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.LayerNorm(36, elementwise_affine=False),
        nn.Linear(36, 3),
    ).double()
    assert isinstance(make_clipper(model), BookKeepingClipper)
    x, y = torch.randn(6, 72, dtype=torch.float64), torch.randint(0, 3, (6,))
    assert_equals_loop(model, x, y, median_norm(model, x, y))


def test_unsupported_layers_fall_back_to_torch_func():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    with pytest.raises(UnsupportedModelError, match=r"not in an nn\.Linear"):
        BookKeepingClipper(model)
    assert isinstance(make_clipper(model), MaterializedClipper)
    assert isinstance(make_clipper(build_model("logreg", n_features=3, n_classes=2)), BookKeepingClipper)
    cnn = build_model("cnn", n_features=784, n_classes=10, image_shape=(1, 28, 28))
    assert isinstance(make_clipper(cnn), BookKeepingClipper)

    torch.manual_seed(9)
    grouped = nn.Sequential(
        nn.Unflatten(1, (2, 5, 5)), nn.Conv2d(2, 4, 3, groups=2), nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(36, 3)
    ).double()
    clipper = make_clipper(grouped)
    assert isinstance(clipper, MaterializedClipper)
    assert clipper.layer_names == ["1", "2", "4"]
    x, y = torch.randn(5, 50, dtype=torch.float64), torch.randint(0, 3, (5,))
    assert_equals_loop(grouped, x, y, median_norm(grouped, x, y), clippers=[("materialized", clipper)])


@pytest.mark.parametrize(
    "model",
    [
        nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)),
        nn.Sequential(nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, affine=False), nn.Flatten()),
    ],
    ids=["batchnorm1d", "batchnorm2d-no-affine"],
)
def test_batchnorm_is_refused_without_fallback(model):
    for make in (BookKeepingClipper, MaterializedClipper, make_clipper):
        with pytest.raises(UnsupportedModelError, match="BatchNorm mixes examples") as caught:
            make(model)
        assert isinstance(caught.value, BatchNormError)

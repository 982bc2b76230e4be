"""Augmentation multiplicity (De et al. 2022, §3.1) in per-example clipping, and the GroupNorm and
weight-standardized conv rules: with K augmented copies per example (rows iK … iK+K−1), each example's gradient is
the mean of its copies' gradients, clipped as one example. Both clippers against the definition (torch.func
gradients of each of the B·K rows, averaged over each group of K, clipped, summed), in float64; one example with
adversarial copies moves the clipped sum by at most C; K = 1 is the plain call, bit for bit."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from engine.training.clipping import BookKeepingClipper, MaterializedClipper, make_clipper, per_layer_thresholds
from engine.training.models.architectures import build_model
from engine.training.models.layers import WeightStandardizedConv2d
from engine.training.trainers.stack import StackedClipper, StackError


class ResidualNormNet(nn.Module):
    """Weight-standardized and plain convs, GroupNorm (affine) on 4-D and 2-D inputs, and a residual addition."""

    def __init__(self, classes: int = 3):
        super().__init__()
        self.stem = WeightStandardizedConv2d(2, 8, 3, padding=1)
        self.norm1 = nn.GroupNorm(4, 8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(2, 8)
        self.standardized = WeightStandardizedConv2d(8, 8, 3, stride=1, padding=1, bias=False)
        self.norm3 = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.stem(x.view(-1, 2, 6, 6))))
        h = h + self.standardized(torch.relu(self.norm2(self.conv(h))))  # residual block
        return self.head(self.norm3(h.mean(dim=(2, 3))))


MODELS = {
    "linear": (lambda: nn.Sequential(nn.Linear(12, 3)), 12),
    "mlp": (lambda: build_model("mlp", n_features=12, n_classes=3, hidden=(6,)), 12),
    "cnn": (lambda: build_model("cnn", n_features=784, n_classes=3, image_shape=(1, 28, 28)), 784),
    "groupnorm-ws-residual": (ResidualNormNet, 72),
}


def owner_groups(model: nn.Module) -> tuple[list[str], list[list[str]]]:
    """Trainable parameter names, grouped by the module that owns them ("1.weight" → layer "1")."""
    groups: dict[str, list[str]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault(name.rpartition(".")[0], []).append(name)
    return list(groups), list(groups.values())


def reference(model: nn.Module, x, y, copies: int, clip_norm):
    """The definition: torch.func gradients of each row, the mean over each example's copies, clipped (flat, or
    per layer with one threshold per layer), summed. Returns (sums by name, norms, clipped flags, loss sum)."""
    layers, groups = owner_groups(model)
    names = [n for group in groups for n in group]
    params = {n: p.detach() for n, p in model.named_parameters() if n in names}

    def row_loss(p, xi, yi):
        return F.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    rows = vmap(grad(row_loss), in_dims=(None, 0, 0))(params, x, y)
    per_example = {n: g.view(-1, copies, *g.shape[1:]).mean(dim=1) for n, g in rows.items()}
    batch = len(x) // copies
    layer_norms = torch.stack(
        [sum(per_example[n].reshape(batch, -1).pow(2).sum(1) for n in group).sqrt() for group in groups], dim=1
    )
    norms = layer_norms.pow(2).sum(1).sqrt()
    if isinstance(clip_norm, float):
        factors = (clip_norm / norms).clamp(max=1.0)[:, None].expand(-1, len(groups))
        flags = norms > clip_norm
    else:
        thresholds = torch.tensor(clip_norm, dtype=x.dtype)
        factors = (thresholds / layer_norms).clamp(max=1.0)
        flags = (layer_norms > thresholds).any(dim=1)
    sums = {}
    for k, group in enumerate(groups):
        for n in group:
            sums[n] = torch.einsum("b,b...->...", factors[:, k], per_example[n])
    with torch.no_grad():
        losses = F.cross_entropy(model(x), y, reduction="none").view(-1, copies).mean(dim=1)
    return sums, norms, flags, losses.sum(), layers


def clippers_of(model: nn.Module):
    yield "bookkeeping", make_clipper(model)
    if any(type(m) is nn.Conv2d for m in model.modules()):
        yield "bookkeeping-ghost", BookKeepingClipper(model, conv_norms="ghost")
        yield "bookkeeping-materialize", BookKeepingClipper(model, conv_norms="materialize")
    yield "materialized", MaterializedClipper(model)


def lot(features: int, examples: int, copies: int, seed: int, classes: int = 3):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(examples * copies, features, generator=generator, dtype=torch.float64)
    return x, torch.randint(0, classes, (examples * copies,), generator=generator)


@pytest.mark.parametrize("copies", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", list(MODELS))
def test_clipped_sum_of_copies_equals_the_definition(kind, copies):
    make, features = MODELS[kind]
    torch.manual_seed(copies)
    model = make().double()
    x, y = lot(features, 5, copies, seed=10 + copies)
    _, norms, _, _, layers = reference(model, x, y, copies, 1.0)
    ordered = norms.sort().values
    flat = float(ordered[2] + ordered[3]) / 2  # some examples clipped, some not, none at the threshold
    per_layer = per_layer_thresholds(flat, len(layers))
    for clip_norm in (flat, per_layer):
        sums, norms, flags, loss_sum, _ = reference(model, x, y, copies, clip_norm)
        assert bool(flags.any()) and (clip_norm is per_layer or not bool(flags.all()))
        for label, clipper in clippers_of(model):
            assert clipper.layer_names == layers
            result = clipper.clipped_sum(x, y, clip_norm, multiplicity=copies)
            names = [n for n, p in model.named_parameters() if p.requires_grad]
            assert result.norms.shape == (5,) and result.clipped.shape == (5,), label
            torch.testing.assert_close(result.norms, norms, rtol=1e-9, atol=1e-12, msg=label)
            assert torch.equal(result.clipped, flags), label
            for name, got in zip(names, result.grads, strict=True):
                torch.testing.assert_close(got, sums[name], rtol=1e-9, atol=1e-12, msg=f"{label} {name}")
            torch.testing.assert_close(result.loss_sum, loss_sum, rtol=1e-12, atol=1e-12, msg=label)


def test_normalization_layers_take_the_book_keeping_path_and_are_not_stacked():
    model = ResidualNormNet()
    clipper = make_clipper(model)
    assert isinstance(clipper, BookKeepingClipper)
    assert clipper.layer_names == ["stem", "norm1", "conv", "norm2", "standardized", "norm3", "head"]
    with pytest.raises(StackError, match=r"'stem' \(WeightStandardizedConv2d\).*'norm1' \(GroupNorm\)"):
        StackedClipper([ResidualNormNet(), ResidualNormNet()])


def test_frozen_parts_of_normalization_layers():
    """A frozen standardized weight (its bias still trained) and a frozen GroupNorm shift (its scale trained)."""
    torch.manual_seed(4)
    model = ResidualNormNet().double()
    model.stem.weight.requires_grad_(False)
    model.norm1.bias.requires_grad_(False)
    x, y = lot(72, 6, 2, seed=5)
    clipper = make_clipper(model)
    assert isinstance(clipper, BookKeepingClipper)
    threshold = float(reference(model, x, y, 2, 1.0)[1].sort().values[2:4].mean())
    sums, norms, flags, _, _ = reference(model, x, y, 2, threshold)
    assert bool(flags.any()) and not bool(flags.all())
    result = clipper.clipped_sum(x, y, threshold, multiplicity=2)
    torch.testing.assert_close(result.norms, norms, rtol=1e-9, atol=1e-12)
    assert torch.equal(result.clipped, flags)
    for got, want in zip(result.grads, [sums[n] for n, p in model.named_parameters() if p.requires_grad], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def adversarial_copies(x: torch.Tensor, copies: int) -> dict[str, torch.Tensor]:
    """One example's K copies, each made to push its gradient far or to cancel."""
    base = x[:1]
    return {
        "huge": base.repeat(copies, 1) * 1e4,
        "opposite": torch.cat([base * (1e3 if k % 2 == 0 else -1e3) for k in range(copies)]),
        "one-huge-rest-zero": torch.cat([base * 1e5, torch.zeros(copies - 1, x.shape[1], dtype=x.dtype)]),
    }


@pytest.mark.parametrize("copies", [1, 2, 3, 4])
def test_one_example_moves_the_clipped_sum_by_at_most_c(copies):
    """Sensitivity: adding one example, whatever its K copies and labels, changes the clipped sum by a vector of
    norm ≤ C, for flat clipping and per-layer clipping (thresholds whose squares sum to C²)."""
    torch.manual_seed(20 + copies)
    model = ResidualNormNet().double()
    x, y = lot(72, 4, copies, seed=30 + copies)
    clip_norm = 0.3
    thresholds = (clip_norm, per_layer_thresholds(clip_norm, 7))
    for label, clipper in (("bookkeeping", make_clipper(model)), ("materialized", MaterializedClipper(model))):
        for threshold in thresholds:
            without = clipper.clipped_sum(x, y, threshold, multiplicity=copies)
            for case, extra in adversarial_copies(x, copies).items():
                labels = torch.arange(copies) % 3  # the copies may even disagree on the label
                with_it = clipper.clipped_sum(
                    torch.cat([x, extra]), torch.cat([y, labels]), threshold, multiplicity=copies
                )
                moved = zip(with_it.grads, without.grads, strict=True)
                change = torch.sqrt(sum((a - b).pow(2).sum() for a, b in moved))
                assert float(change) <= clip_norm * (1 + 1e-9), f"{label} {case}: {float(change)}"
                assert float(change) > 0.5 * clip_norm, f"{label} {case}: the example was not added"
                assert bool(with_it.clipped[-1]), f"{label} {case}"


@pytest.mark.parametrize("kind", ["mlp", "cnn", "groupnorm-ws-residual"])
def test_multiplicity_one_is_the_plain_call_bit_for_bit(kind):
    make, features = MODELS[kind]
    torch.manual_seed(7)
    model = make()
    x, y = lot(features, 9, 1, seed=8)
    x = x.float()
    for clipper in (make_clipper(model), MaterializedClipper(model)):
        plain, one = clipper.clipped_sum(x, y, 0.4), clipper.clipped_sum(x, y, 0.4, multiplicity=1)
        assert all(torch.equal(a, b) for a, b in zip(plain.grads, one.grads, strict=True))
        assert torch.equal(plain.norms, one.norms) and torch.equal(plain.clipped, one.clipped)
        assert torch.equal(plain.loss_sum, one.loss_sum) and torch.equal(plain.correct, one.correct)


def test_rows_must_be_whole_groups_of_copies():
    model = build_model("mlp", n_features=12, n_classes=3, hidden=(6,))
    x, y = lot(12, 7, 1, seed=1)
    for clipper in (make_clipper(model), MaterializedClipper(model)):
        with pytest.raises(ValueError, match="7 rows are not whole groups of 2 copies"):
            clipper.clipped_sum(x.float(), y, 1.0, multiplicity=2)
        with pytest.raises(ValueError, match="multiplicity must be an integer"):
            clipper.clipped_sum(x.float(), y, 1.0, multiplicity=0)

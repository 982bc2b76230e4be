"""Per-example clipping: the book-keeping path equals a per-example loop and torch.func."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.training.clipping import BookKeepingClipper, MaterializedClipper, UnsupportedModelError, make_clipper
from engine.training.models import build_model


def loop_clipped_sum(model: nn.Module, x, y, clip_norm):
    """The definition: one backward per example, clip its gradient, add them up."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    norms = []
    for i in range(len(x)):
        loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        norms.append(norm)
        factor = min(1.0, clip_norm / norm.item())
        for t, g in zip(total, grads, strict=True):
            t += factor * g
    return total, torch.stack(norms)


@pytest.mark.parametrize(("model_name", "hidden"), [("logreg", ()), ("mlp", (32,)), ("mlp", (16, 8))])
@pytest.mark.parametrize("clip_norm", [0.05, 1.0, 100.0])
def test_bookkeeping_equals_per_example_loop(model_name, hidden, clip_norm):
    torch.manual_seed(0)
    model = build_model(model_name, n_features=12, n_classes=5, hidden_sizes=hidden).double()
    x = torch.randn(23, 12, dtype=torch.float64) * 3
    y = torch.randint(0, 5, (23,))
    expected, expected_norms = loop_clipped_sum(model, x, y, clip_norm)
    for clipper in (BookKeepingClipper(model), MaterializedClipper(model)):
        result = clipper.clipped_sum(x, y, clip_norm)
        torch.testing.assert_close(result.norms, expected_norms, rtol=1e-10, atol=1e-12)
        for got, want in zip(result.grads, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        expected_loss = F.cross_entropy(model(x), y, reduction="sum").item()
        assert result.loss_sum.item() == pytest.approx(expected_loss)


def test_each_example_contributes_at_most_clip_norm():
    torch.manual_seed(1)
    model = build_model("mlp", n_features=8, n_classes=3, hidden_sizes=(16,))
    clipper = BookKeepingClipper(model)
    x, y = torch.randn(1, 8) * 50, torch.tensor([2])
    result = clipper.clipped_sum(x, y, 0.5)
    assert float(result.norms[0]) > 0.5
    total = torch.sqrt(sum(g.pow(2).sum() for g in result.grads))
    assert float(total) == pytest.approx(0.5, rel=1e-5)


def test_empty_lot_gives_zero_gradients():
    model = build_model("mlp", n_features=4, n_classes=3, hidden_sizes=(5,))
    result = BookKeepingClipper(model).clipped_sum(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), 1.0)
    assert all(float(g.abs().sum()) == 0.0 for g in result.grads)
    assert [g.shape for g in result.grads] == [p.shape for p in model.parameters()]


def test_unsupported_layers_fall_back_to_torch_func():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    with pytest.raises(UnsupportedModelError, match=r"not in an nn\.Linear"):
        BookKeepingClipper(model)
    assert isinstance(make_clipper(model), MaterializedClipper)
    assert isinstance(make_clipper(build_model("logreg", n_features=3, n_classes=2)), BookKeepingClipper)

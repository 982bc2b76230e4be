"""The book-keeping clipper's own logits for a model that is one nn.Linear (`linear_logits`): the product
F.linear computes, within the rounding of a d-term float32 dot product, and the clipped sum that follows; a
model of two linear layers is not one; and a forward hook, which could change what a layer computes, is refused."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.training.clipping import BookKeepingClipper, MaterializedClipper, UnsupportedModelError, make_clipper
from engine.training.clipping.bookkeeping import linear_logits
from engine.training.models.architectures import build_model

U = torch.finfo(torch.float32).eps / 2  # unit roundoff


@pytest.mark.parametrize("batch", [1, 7, 256])
def test_linear_logits_are_f_linear_within_the_rounding_of_a_dot_product(batch):
    """Two float32 evaluations of Σⱼ xⱼwⱼ + b in any order each lie within γ_{d+1}·Σ|xⱼwⱼ| + |b| of the
    exact value, γₙ = nu/(1 − nu) (Higham, Accuracy and Stability, §3.1), so they differ by at most twice that."""
    torch.manual_seed(batch)
    layer = torch.nn.Linear(784, 10)
    x = torch.randn(batch, 784)
    ours, theirs = linear_logits(layer, x), F.linear(x, layer.weight, layer.bias).detach()
    n = 785
    gamma = n * U / (1 - n * U)
    bound = 2 * gamma * ((x.abs() @ layer.weight.detach().abs().T) + layer.bias.detach().abs())
    assert ours.shape == theirs.shape and ours.is_contiguous() and not ours.requires_grad
    assert bool(((ours - theirs).abs() <= bound).all())


def test_logistic_regression_takes_the_direct_logits_and_clips_as_a_per_example_computation():
    torch.manual_seed(0)
    model = build_model("logreg", n_features=30, n_classes=4)
    x, y = torch.randn(64, 30, dtype=torch.float64), torch.randint(0, 4, (64,))
    assert assert_clips_as_per_example(model.double(), x, y).single_linear


def test_a_model_with_more_than_one_layer_keeps_the_module_call():
    assert not BookKeepingClipper(build_model("mlp", n_features=8, n_classes=3, hidden=(4,))).single_linear


def assert_clips_as_per_example(model: nn.Module, x, y, clip_norm=0.5) -> BookKeepingClipper:
    """Float64: the book-keeping sum equals the per-example (torch.func) computation to rounding."""
    clipper = BookKeepingClipper(model)
    ours, reference = clipper.clipped_sum(x, y, clip_norm), MaterializedClipper(model).clipped_sum(x, y, clip_norm)
    for a, b in zip(ours.grads, reference.grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.norms, reference.norms, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.loss_sum, reference.loss_sum, rtol=1e-12, atol=1e-12)
    assert bool((ours.clipped == reference.clipped).all())
    with torch.no_grad():
        assert int(ours.correct) == int((model(x).argmax(1) == y).sum())
    return clipper


def test_two_linear_layers_in_a_row_are_not_taken_for_logistic_regression():
    """Before, any nn.Sequential of nn.Linear layers alone counted as one linear layer, and its logits were the
    first layer's output."""
    torch.manual_seed(3)
    x, y = torch.randn(25, 6, dtype=torch.float64), torch.randint(0, 3, (25,))
    model = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 3)).double()
    assert not assert_clips_as_per_example(model, x, y).single_linear


def test_a_forward_hook_on_any_layer_is_refused_by_name_and_make_clipper_falls_back():
    """A hook may replace a layer's output (here tripling the logits), which the layer's rule would not see: the
    norms, and so the clipping, would be of another gradient. A hook present when the clipper is made sends
    `make_clipper` to the per-example clipper, which runs the hooked model as it is; one added later is refused
    at the next clipped sum, on every path (one linear layer, the general one)."""
    torch.manual_seed(2)
    x, y = torch.randn(20, 6), torch.randint(0, 3, (20,))
    for model, layer in (
        (nn.Sequential(nn.Linear(6, 3)), "0"),
        (nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)), "2"),
        (nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)), "0"),
    ):
        clipper = BookKeepingClipper(model)
        model.get_submodule(layer).register_forward_hook(lambda module, inputs, output: 3.0 * output)
        with pytest.raises(UnsupportedModelError, match=rf"layer\(s\) '{layer}' have forward hooks"):
            clipper.clipped_sum(x, y, 1.0)
        with pytest.raises(UnsupportedModelError, match="forward hooks"):
            BookKeepingClipper(model)
        assert isinstance(make_clipper(model), MaterializedClipper)

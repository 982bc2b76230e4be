"""The book-keeping clipper's own logits for a model that is one nn.Linear (`linear_logits`): the product
F.linear computes, within the rounding of a d-term float32 dot product, and the clipped sum that follows."""

import pytest
import torch
import torch.nn.functional as F

from engine.training.clipping import BookKeepingClipper, MaterializedClipper
from engine.training.clipping.bookkeeping import linear_logits
from engine.training.features.models import build_model

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
    model = model.double()
    fast = BookKeepingClipper(model)
    assert fast.single_linear
    ours, reference = fast.clipped_sum(x, y, 0.5), MaterializedClipper(model).clipped_sum(x, y, 0.5)
    for a, b in zip(ours.grads, reference.grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.norms, reference.norms, rtol=1e-10, atol=1e-12)
    assert int(ours.correct) == int((model(x).argmax(1) == y).sum())


def test_a_model_with_more_than_one_layer_keeps_the_module_call():
    assert not BookKeepingClipper(build_model("mlp", n_features=8, n_classes=3, hidden=(4,))).single_linear

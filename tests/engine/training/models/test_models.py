"""Models: names, descriptions, shapes, and the CNN's image-size checks."""

import ast
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from engine.training.models import architectures as models
from engine.training.models.architectures import build_model, cnn_supports
from engine.training.models.registry import MODELS, UnknownModelError, model_entry


def test_every_model_is_described():
    assert tuple(MODELS) == ("logreg", "mlp", "cnn", "wrn")
    assert all(entry.title and entry.description for entry in MODELS.values())
    assert "Tramèr & Boneh 2021" in MODELS["cnn"].description
    assert [name for name, entry in MODELS.items() if entry.needs_images] == ["cnn", "wrn"]
    with pytest.raises(UnknownModelError, match="one of logreg, mlp, cnn, wrn; got 'resnet'"):
        model_entry("resnet")


def test_models_module_does_not_import_the_spec():
    """spec.py imports MODELS from models.py, not the other way round."""
    tree = ast.parse(Path(models.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "engine.training.config.spec" not in imported


@pytest.mark.parametrize(("image_shape", "flat", "n_params"), [((1, 28, 28), 512, 26_010), ((3, 32, 32), 800, 37_274)])
def test_cnn_shapes(image_shape, flat, n_params):
    torch.manual_seed(0)
    n = math.prod(image_shape)
    model = build_model("cnn", n_features=n, n_classes=10, image_shape=image_shape)
    assert model(torch.rand(3, n)).shape == (3, 10)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(flat, 32), (32, 10)]
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    assert [(m.out_channels, m.kernel_size, m.stride, m.padding) for m in convs] == [
        (16, (8, 8), (2, 2), (3, 3)),
        (32, (4, 4), (2, 2), (0, 0)),
    ]
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert sum(isinstance(m, nn.Tanh) for m in model) == 3


def test_cnn_needs_a_large_enough_image():
    assert cnn_supports((1, 28, 28)) and cnn_supports((3, 32, 32)) and cnn_supports((1, 14, 14))
    assert not cnn_supports((1, 8, 8))
    assert not cnn_supports((1, 13, 13))
    assert not cnn_supports(None)
    assert not cnn_supports((28, 28))
    with pytest.raises(ValueError, match="image_shape"):
        build_model("cnn", n_features=784, n_classes=10)
    with pytest.raises(ValueError, match="image_shape"):
        build_model("cnn", n_features=64, n_classes=10, image_shape=(1, 8, 8))
    with pytest.raises(ValueError, match="n_features"):
        build_model("cnn", n_features=780, n_classes=10, image_shape=(1, 28, 28))


def test_logreg_and_mlp():
    assert build_model("logreg", n_features=5, n_classes=3)(torch.zeros(2, 5)).shape == (2, 3)
    mlp = build_model("mlp", n_features=5, n_classes=3, hidden=(7, 4))
    assert [(m.in_features, m.out_features) for m in mlp if isinstance(m, nn.Linear)] == [(5, 7), (7, 4), (4, 3)]
    with pytest.raises(ValueError, match="model must be one of logreg, mlp, cnn"):
        build_model("resnet", n_features=5, n_classes=3)


@pytest.mark.parametrize("name", MODELS)
def test_no_model_mixes_examples(name):
    torch.manual_seed(0)
    model = build_model(name, n_features=784, n_classes=10, hidden=(16,), image_shape=(1, 28, 28), wrn_width=1)
    assert not any("BatchNorm" in type(m).__name__ for m in model.modules())
    x = torch.rand(3, 784)
    others_changed = torch.cat([x[:1], torch.rand(2, 784) * 3])
    torch.testing.assert_close(model(x)[0], model(others_changed)[0])  # GroupNorm normalizes one example alone

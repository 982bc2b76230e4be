"""Models: logistic regression, a ReLU MLP and the tanh CNN of Tramèr & Boneh 2021.

Every model takes flattened float inputs of shape (B, n_features); the CNN unflattens them to
(B, C, H, W) itself. No model normalizes across the batch (BatchNorm would mix examples and break
per-example privacy), so every per-example gradient depends on that example alone.
"""

import itertools
import math

import torch
from torch import nn

MODELS = ("logreg", "mlp", "cnn")
MODEL_DESCRIPTIONS: dict[str, str] = {
    "logreg": "Multinomial logistic regression, one linear layer (convex baseline; Chaudhuri et al. 2011, JMLR)",
    "mlp": "ReLU multilayer perceptron (Abadi et al. 2016, CCS: one hidden layer of 1000 units on MNIST)",
    "cnn": "Tanh CNN of Tramèr & Boneh 2021 (ICLR), 26k params on 1×28×28",
}

# The CNN's feature extractor, as (kind, out channels, kernel, stride, padding); pools have no channels.
_CNN_STAGES: tuple[tuple[str, int, int, int, int], ...] = (
    ("conv", 16, 8, 2, 3),
    ("pool", 0, 2, 1, 0),
    ("conv", 32, 4, 2, 0),
    ("pool", 0, 2, 1, 0),
)
_CNN_HIDDEN = 32


def _cnn_feature_shape(image_shape: object) -> tuple[int, int, int] | None:
    """(C, H, W) after the CNN's convolutions and pools, or None if `image_shape` cannot go through them."""
    if not isinstance(image_shape, tuple | list) or len(image_shape) != 3:
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in image_shape):
        return None
    channels, height, width = image_shape
    for kind, out_channels, kernel, stride, padding in _CNN_STAGES:
        height = (height + 2 * padding - kernel) // stride + 1
        width = (width + 2 * padding - kernel) // stride + 1
        if height < 1 or width < 1:
            return None
        if kind == "conv":
            channels = out_channels
    return channels, height, width


def cnn_supports(image_shape: tuple[int, int, int] | None) -> bool:
    """Whether the CNN accepts images of shape (C, H, W): 1×28×28 and 3×32×32 do, 1×8×8 is too small."""
    return _cnn_feature_shape(image_shape) is not None


def _build_cnn(n_features: int, n_classes: int, image_shape: tuple[int, int, int] | None) -> nn.Sequential:
    if image_shape is None:
        raise ValueError("model 'cnn' needs image_shape (C, H, W); this dataset has none")
    features = _cnn_feature_shape(image_shape)
    if features is None:
        raise ValueError(f"image_shape {image_shape!r} is not a (C, H, W) image large enough for model 'cnn'")
    if math.prod(image_shape) != n_features:
        size = math.prod(image_shape)
        raise ValueError(f"image_shape {tuple(image_shape)} has {size} values, but n_features = {n_features}")
    layers: list[nn.Module] = [nn.Unflatten(1, tuple(image_shape))]
    channels = image_shape[0]
    for kind, out_channels, kernel, stride, padding in _CNN_STAGES:
        if kind == "conv":
            layers += [nn.Conv2d(channels, out_channels, kernel, stride=stride, padding=padding), nn.Tanh()]
            channels = out_channels
        else:
            layers.append(nn.MaxPool2d(kernel, stride=stride))
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(math.prod(features), _CNN_HIDDEN),
        nn.Tanh(),
        nn.Linear(_CNN_HIDDEN, n_classes),
    )


def build_model(
    name: str,
    *,
    n_features: int,
    n_classes: int,
    hidden: tuple[int, ...] = (),
    image_shape: tuple[int, int, int] | None = None,
) -> nn.Sequential:
    """A fresh model; initialization draws from torch's global generator (seed it first).

    `hidden` (the MLP's layer widths) applies to "mlp" only; `image_shape` (C, H, W) with
    C·H·W = n_features is required by "cnn" and ignored by the others.
    """
    if name == "logreg":
        return nn.Sequential(nn.Linear(n_features, n_classes))
    if name == "mlp":
        widths = (n_features, *hidden)
        layers: list[nn.Module] = []
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(widths[-1], n_classes))
    if name == "cnn":
        return _build_cnn(n_features, n_classes, image_shape)
    raise ValueError(f"model must be one of {', '.join(MODELS)}; got {name!r}")


def trainable_coordinates(
    name: str,
    *,
    n_features: int,
    n_classes: int,
    hidden: tuple[int, ...] = (),
    image_shape: tuple[int, int, int] | None = None,
) -> int:
    """The trainable coordinates of `build_model`'s model, `sum(p.numel())` over the parameters that require a
    gradient, counted on torch's "meta" device: the very model, built without memory or a random draw."""
    with torch.device("meta"):
        model = build_model(name, n_features=n_features, n_classes=n_classes, hidden=hidden, image_shape=image_shape)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

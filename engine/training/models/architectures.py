"""Models: logistic regression, a ReLU MLP, the tanh CNNs of Tramèr & Boneh 2021 and a wide ResNet.

Every model takes flattened float inputs of shape (B, n_features); the CNNs and the wide ResNet unflatten them to
(B, C, H, W) themselves. No model normalizes across the batch (BatchNorm would mix examples and break
per-example privacy), so every per-example gradient depends on that example alone; the wide ResNet's GroupNorm
normalizes each example on its own.

"cnn" is Tramèr & Boneh's CNN for the inputs it is given: on pixels, the CNN of their end-to-end baseline
(Papernot et al. 2020's tanh CNN); on ScatterNet features (`features="scatternet"`, `image_shape` then being the
scattering coefficients' (K, h, w), `model_image_shape`), their smaller CNN on the coefficients ("Differentially
Private Learning Needs Better Features (or Much More Data)", ICLR 2021; ftramer/Handcrafted-DP, models.py:
`MNIST_CNN` and `CIFAR10_CNN` with `in_channels` = K). Their CNNs' input GroupNorm (no affine parameters) is
the ScatterNet features' own normalization (`scatternet.scatter`), applied once, before the model.
"""

import itertools
import math
from typing import Any

import torch
from torch import nn

from engine.training.features import scatternet
from engine.training.models import wide_resnet
from engine.training.models.registry import ImageShape, ModelEntry, model_entry, register_model
from engine.training.models.wide_resnet import DEFAULT_DEPTH, DEFAULT_WIDTH, build_wide_resnet

# A CNN's feature extractor, as (kind, out channels, kernel, stride, padding); pools have no channels.
Stage = tuple[str, int, int, int, int]
_CNN_STAGES: tuple[Stage, ...] = (
    ("conv", 16, 8, 2, 3),
    ("pool", 0, 2, 1, 0),
    ("conv", 32, 4, 2, 0),
    ("pool", 0, 2, 1, 0),
)
_CNN_HIDDEN = 32
# Tramèr & Boneh's CNNs on ScatterNet coefficients, by the image's colour channels, with the width of the hidden
# linear layer (None: none). Grey (MNIST_CNN, 33k params on MNIST's 81×7×7): two 3×3 convolutions, the first of
# stride 2. Colour (CIFAR10_CNN's default size, 187k params on CIFAR-10's 243×8×8): 3×3 conv → 2×2 max pool →
# 3×3 conv, then one linear layer.
_SCATTER_CNNS: dict[int, tuple[tuple[Stage, ...], int | None]] = {
    1: ((("conv", 16, 3, 2, 1), ("conv", 32, 3, 1, 1)), 32),
    3: ((("conv", 64, 3, 1, 1), ("pool", 0, 2, 2, 0), ("conv", 64, 3, 1, 1)), None),
}


def model_image_shape(features: str, image_shape: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    """The (C, H, W) an image model's input has: the image's, or (ScatterNet features) its scattering
    coefficients' (`scatternet.scattering_shape`: 81×7×7 for 1×28×28)."""
    if features == "scatternet" and image_shape is not None:
        return scatternet.scattering_shape(tuple(image_shape))
    return image_shape


def _stages_for(image_shape: tuple[int, int, int], features: str) -> tuple[tuple[Stage, ...], int | None]:
    if features == "scatternet":
        colours = image_shape[0] // scatternet.CHANNELS_PER_COLOUR
        return _SCATTER_CNNS[1 if colours == 1 else 3]
    return _CNN_STAGES, _CNN_HIDDEN


def _cnn_feature_shape(image_shape: object, features: str = "pixels") -> tuple[int, int, int] | None:
    """(C, H, W) after the CNN's convolutions and pools, or None if `image_shape` cannot go through them."""
    if not isinstance(image_shape, tuple | list) or len(image_shape) != 3:
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in image_shape):
        return None
    channels, height, width = image_shape
    for kind, out_channels, kernel, stride, padding in _stages_for(tuple(image_shape), features)[0]:
        height = (height + 2 * padding - kernel) // stride + 1
        width = (width + 2 * padding - kernel) // stride + 1
        if height < 1 or width < 1:
            return None
        if kind == "conv":
            channels = out_channels
    return channels, height, width


def cnn_supports(image_shape: tuple[int, int, int] | None, features: str = "pixels") -> bool:
    """Whether the CNN accepts images of shape (C, H, W): 1×28×28 and 3×32×32 do, 1×8×8 is too small. With
    ScatterNet features, `image_shape` is the coefficients' (`model_image_shape`)."""
    return _cnn_feature_shape(image_shape, features) is not None


def cnn_takes(image_shape: ImageShape | None, features: str) -> bool:
    """Whether the CNN takes a dataset's images of this shape: as pixels (`cnn_supports`), or through ScatterNet,
    on any image ScatterNet takes (their CNN on the coefficients fits them all)."""
    return scatternet.supports(image_shape) if features == "scatternet" else cnn_supports(image_shape)


def _build_cnn(
    n_features: int, n_classes: int, image_shape: tuple[int, int, int] | None, features: str
) -> nn.Sequential:
    if image_shape is None:
        raise ValueError("model 'cnn' needs image_shape (C, H, W); this dataset has none")
    out_shape = _cnn_feature_shape(image_shape, features)
    if out_shape is None:
        raise ValueError(f"image_shape {image_shape!r} is not a (C, H, W) image large enough for model 'cnn'")
    if math.prod(image_shape) != n_features:
        size = math.prod(image_shape)
        raise ValueError(f"image_shape {tuple(image_shape)} has {size} values, but n_features = {n_features}")
    stages, hidden = _stages_for(tuple(image_shape), features)
    layers: list[nn.Module] = [nn.Unflatten(1, tuple(image_shape))]
    channels = image_shape[0]
    for kind, out_channels, kernel, stride, padding in stages:
        if kind == "conv":
            layers += [nn.Conv2d(channels, out_channels, kernel, stride=stride, padding=padding), nn.Tanh()]
            channels = out_channels
        else:
            layers.append(nn.MaxPool2d(kernel, stride=stride))
    layers.append(nn.Flatten())
    if hidden is None:
        return nn.Sequential(*layers, nn.Linear(math.prod(out_shape), n_classes))
    return nn.Sequential(*layers, nn.Linear(math.prod(out_shape), hidden), nn.Tanh(), nn.Linear(hidden, n_classes))


def build_model(
    name: str,
    *,
    n_features: int,
    n_classes: int,
    image_shape: tuple[int, int, int] | None = None,
    features: str = "pixels",
    **options: Any,
) -> nn.Module:
    """A fresh model of any registered kind (`registry.MODELS`); initialization draws from torch's global generator
    (seed it first). An unknown name raises `registry.UnknownModelError` (a ValueError).

    `image_shape` (C, H, W) with C·H·W = n_features is required by "cnn" and "wrn" and ignored by the others.
    `features`: what the inputs are, "pixels" or "scatternet" (then `image_shape` is the scattering coefficients',
    `model_image_shape`, and "cnn" is Tramèr & Boneh's CNN on them). `options`: the spec keys that shape a model,
    `hidden` (the MLP's layer widths), `wrn_depth` (6n + 4) and `wrn_width` (the wide ResNet's); each model reads
    its own.
    """
    builder = model_entry(name).builder
    return builder(n_features=n_features, n_classes=n_classes, image_shape=image_shape, features=features, **options)


def build_logreg(*, n_features: int, n_classes: int, **_: Any) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_features, n_classes))


def build_mlp(*, n_features: int, n_classes: int, hidden: tuple[int, ...] = (), **_: Any) -> nn.Sequential:
    widths = (n_features, *hidden)
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], n_classes))


def build_cnn(
    *, n_features: int, n_classes: int, image_shape: ImageShape | None = None, features: str = "pixels", **_: Any
) -> nn.Sequential:
    return _build_cnn(n_features, n_classes, image_shape, features)


def build_wrn(
    *,
    n_features: int,
    n_classes: int,
    image_shape: ImageShape | None = None,
    wrn_depth: int = DEFAULT_DEPTH,
    wrn_width: int = DEFAULT_WIDTH,
    **_: Any,
) -> nn.Module:
    return build_wide_resnet(
        n_features=n_features, n_classes=n_classes, image_shape=image_shape, depth=wrn_depth, width=wrn_width
    )


def trainable_coordinates(name: str, *, n_features: int, n_classes: int, **options) -> int:
    """The trainable coordinates of `build_model`'s model (`options`: its other keywords), `sum(p.numel())` over
    the parameters that require a gradient, counted on torch's "meta" device: the very model, built without
    memory or a random draw."""
    with torch.device("meta"):
        model = build_model(name, n_features=n_features, n_classes=n_classes, **options)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# The lab's own models, in the order the Train form offers them.
register_model(
    ModelEntry(
        name="logreg",
        title="Logistic regression",
        description="Multinomial logistic regression, one linear layer (convex baseline; Chaudhuri et al. 2011, JMLR)",
        builder=build_logreg,
    )
)
register_model(
    ModelEntry(
        name="mlp",
        title="MLP (one ReLU hidden layer)",
        description="ReLU multilayer perceptron (Abadi et al. 2016, CCS: one hidden layer of 1000 units on MNIST)",
        builder=build_mlp,
        options=("hidden",),
    )
)
register_model(
    ModelEntry(
        name="cnn",
        title="CNN (tanh)",
        description="Tanh CNN of Tramèr & Boneh 2021 (ICLR), 26k params on 1×28×28; on ScatterNet features their CNN "
        "on the scattering coefficients, 33k params on MNIST",
        builder=build_cnn,
        needs_images=True,
        supports=lambda shape, features: (
            scatternet.supports(shape) if features == "scatternet" else cnn_supports(shape)
        ),
    )
)
register_model(
    ModelEntry(
        name="wrn",
        title="Wide ResNet (GroupNorm)",
        description="Wide ResNet WRN-d-k with GroupNorm and weight-standardized convolutions (De et al. 2022; "
        "Zagoruyko & Komodakis 2016), 2.75M params as WRN-16-4 on 3×32×32",
        builder=build_wrn,
        options=("wrn_depth", "wrn_width"),
        needs_images=True,
        supports=lambda shape, features: features == "pixels" and wide_resnet.supports(shape),
    )
)

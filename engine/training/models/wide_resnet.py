"""Wide ResNets for DP-SGD (Zagoruyko & Komodakis 2016, "Wide Residual Networks"; De et al. 2022, "Unlocking
High-Accuracy Differentially Private Image Classification through Scale"): WRN-d-k with group normalization and
weight-standardized convolutions in place of batch normalization, as in De et al.'s reference implementation
(DeepMind's jax_privacy, `experiments/image_classification/models/cifar.py`, class `WideResNet`).

The layout, for depth d = 6n + 4 and width k:

- a stem: a 3×3 convolution to 16 channels;
- three stages of n pre-activation residual blocks with 16k, 32k and 64k channels, the second and third starting
  with a stride-2 block. A block adds its residual branch, (ReLU → GroupNorm → 3×3 convolution) twice, to its
  shortcut: the input itself, or, in the first block of each stage, ReLU → GroupNorm → 1×1 convolution (with the
  block's stride) — jax_privacy projects there even when the shape is kept (stage 1 of WRN-d-1);
- a head: ReLU → GroupNorm → global average pool → linear layer to the classes.

Every convolution is `engine.training.models.layers.WeightStandardizedConv2d` with a bias (initialized to zero, as in
jax_privacy); every GroupNorm has 16 groups (fewer where the channels are not divisible by 16) and affine
parameters. No layer mixes examples: each example's output, loss and gradient depend on that example alone.
jax_privacy's WSConv2D also has a learned gain per filter; the lab's layer has none (the GroupNorm after every
convolution but the stem and the last has its own scale).

Any image (C, H, W) with H, W ≥ 8 fits (CIFAR-10's 3×32×32 → 8×8 before the pool; MNIST's 1×28×28 → 7×7).
WRN-16-4 on 3×32×32 has 2,751,562 parameters (WRN-10-1: 78,586).
"""

import math

from torch import Tensor, nn

from engine.training.models.layers import WeightStandardizedConv2d

DEPTHS = tuple(range(10, 41, 6))  # 6n + 4 with n = 1…6 blocks per stage: 10, 16, 22, 28, 34, 40
DEFAULT_DEPTH = 16
DEFAULT_WIDTH = 4  # WRN-16-4: De et al.'s CIFAR-10 model at ε ≤ 8 without extra data
GROUPS = 16
STEM_CHANNELS = 16
STAGE_CHANNELS = (16, 32, 64)  # times the width
MIN_SIDE = 8  # two stride-2 stages leave at least 2×2 to pool


def depth_problem(depth: int) -> str | None:
    """Why `depth` is not a wide ResNet's depth (None: it is one)."""
    if depth in DEPTHS:
        return None
    return f"must be 6n + 4 for n = 1 to 6 blocks per stage ({', '.join(map(str, DEPTHS))}), got {depth}"


def supports(image_shape: object) -> bool:
    """Whether a wide ResNet takes images of shape (C, H, W): any C, and H, W ≥ 8."""
    if not isinstance(image_shape, tuple | list) or len(image_shape) != 3:
        return False
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in image_shape):
        return False
    return image_shape[1] >= MIN_SIDE and image_shape[2] >= MIN_SIDE


def group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm with `GROUPS` groups (the largest divisor of both where `channels` is not a multiple), affine."""
    return nn.GroupNorm(math.gcd(GROUPS, channels), channels, affine=True)


def standardized_conv(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> WeightStandardizedConv2d:
    conv = WeightStandardizedConv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2)
    nn.init.zeros_(conv.bias)
    return conv


class WideBlock(nn.Module):
    """A pre-activation residual block: `residual(x) + shortcut(x)` (see the module docstring)."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int, projected: bool):
        super().__init__()
        self.residual = nn.Sequential(
            nn.ReLU(),
            group_norm(in_channels),
            standardized_conv(in_channels, out_channels, 3, stride),
            nn.ReLU(),
            group_norm(out_channels),
            standardized_conv(out_channels, out_channels, 3),
        )
        if not projected and (in_channels != out_channels or stride != 1):
            raise ValueError("a block that changes the shape needs a projected shortcut")
        self.shortcut = (
            nn.Sequential(nn.ReLU(), group_norm(in_channels), standardized_conv(in_channels, out_channels, 1, stride))
            if projected
            else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.residual(x) + self.shortcut(x)


def build_wide_resnet(
    *, n_features: int, n_classes: int, image_shape: tuple[int, int, int] | None, depth: int, width: int
) -> nn.Sequential:
    """WRN-`depth`-`width` on flattened images of `image_shape` (C·H·W = `n_features`)."""
    if image_shape is None or not supports(image_shape):
        raise ValueError(f"model 'wrn' needs image_shape (C, H, W) with H, W ≥ {MIN_SIDE}; got {image_shape!r}")
    if math.prod(image_shape) != n_features:
        size = math.prod(image_shape)
        raise ValueError(f"image_shape {tuple(image_shape)} has {size} values, but n_features = {n_features}")
    if (problem := depth_problem(depth)) is not None:
        raise ValueError(f"wrn depth {problem}")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"wrn width must be a positive integer, got {width!r}")
    blocks_per_stage = (depth - 4) // 6
    layers: list[nn.Module] = [nn.Unflatten(1, tuple(image_shape)), standardized_conv(image_shape[0], STEM_CHANNELS, 3)]
    channels = STEM_CHANNELS
    for stage, stage_channels in enumerate(STAGE_CHANNELS):
        for block in range(blocks_per_stage):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(WideBlock(channels, stage_channels * width, stride=stride, projected=block == 0))
            channels = stage_channels * width
    head = nn.Linear(channels, n_classes)
    nn.init.zeros_(head.bias)
    return nn.Sequential(*layers, nn.ReLU(), group_norm(channels), nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)


__all__ = ["DEFAULT_DEPTH", "DEFAULT_WIDTH", "DEPTHS", "WideBlock", "build_wide_resnet", "depth_problem", "supports"]

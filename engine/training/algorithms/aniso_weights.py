"""Anisotropic DP-SGD's weights W (`aniso`): the weight rule, a function of public numbers and the released noisy
updates only (`ReleasedGradientWeights`), and how its weights map onto the trained parameters (`WeightLayout`).
Why W may depend on the releases, and how the rule picks it, is told in `aniso`'s docstring."""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Granularity = Literal["layer", "coordinate"]
GRANULARITIES: tuple[str, ...] = ("layer", "coordinate")
WARMUP_STEPS = 10  # releases averaged before the weights leave 1
BISECTION_STEPS = 60  # of the normalizing shift in log space: the interval shrinks by 2⁻⁶⁰
DEFAULT_SMOOTHING = 0.9
DEFAULT_MAX_RATIO = 10.0


# ------------------------------------------------------------------------------ the weight rule


def sensitivity_estimate(mean_square: Tensor, noise_variance: Tensor, sizes: Tensor, smoothing: float) -> Tensor:
    """sⱼ = max(EMA(ĝⱼ²) − EMA(vⱼ), floorⱼ) per group j (a layer or a coordinate), vⱼ the noise variance of ĝ.

    floorⱼ is the standard error of that difference when ĝ is pure noise: a mean of nⱼ squared Gaussians
    of variance vⱼ has variance 2vⱼ²/nⱼ, and the running average multiplies it by (1 − β)/(1 + β). A signal
    below it cannot be told from none, so every such group gets the same (relative) floor. Public: it
    depends on σ, C, L, w, β and the layer sizes only."""
    standard_error = noise_variance * torch.sqrt(2 * (1 - smoothing) / (1 + smoothing) / sizes)
    floor = torch.clamp(standard_error, min=torch.finfo(noise_variance.dtype).tiny)
    return torch.maximum(mean_square - noise_variance, floor)


def weights_from_sensitivity(sensitivity: Tensor, sizes: Tensor, max_ratio: float) -> Tensor:
    """w ∝ s^(−1/2) with Σ sizes·log w = 0 (geometric mean 1 over coordinates) and w ∈ [1/r, r].

    log w = clamp(−½ log s − t, −log r, log r) with the shift t that makes the size-weighted sum 0: that
    sum falls monotonically in t, from +log r·Σsizes to −log r·Σsizes, so bisection finds it."""
    if max_ratio < 1.0:
        raise ValueError(f"max_ratio must be ≥ 1, got {max_ratio}")
    bound = math.log(max_ratio)
    if bound == 0.0:
        return torch.ones_like(sensitivity)
    target = -0.5 * sensitivity.log()
    low, high = target.min() - bound, target.max() + bound
    for _ in range(BISECTION_STEPS):  # tensor ops only: no device sync
        mid = (low + high) / 2
        above = ((target - mid).clamp(-bound, bound) * sizes).sum() > 0
        low, high = torch.where(above, mid, low), torch.where(above, high, mid)
    return (target - (low + high) / 2).clamp(-bound, bound).exp()


@dataclass(frozen=True)
class WeightLayout:
    """How weights map onto the trained parameters: one per layer (`param_layers[i]`: the layer of
    parameter i) or one per coordinate (the parameters flattened and concatenated, in order)."""

    granularity: Granularity
    shapes: tuple[torch.Size, ...]
    param_layers: tuple[int, ...]
    device: torch.device

    @property
    def groups(self) -> int:
        if self.granularity == "layer":
            return max(self.param_layers, default=-1) + 1
        return sum(math.prod(s) for s in self.shapes)

    def sizes(self) -> Tensor:
        """Coordinates per group, float64."""
        if self.granularity == "coordinate":
            return torch.ones(self.groups, dtype=torch.float64, device=self.device)
        sizes = torch.zeros(self.groups, dtype=torch.float64, device=self.device)
        for shape, layer in zip(self.shapes, self.param_layers, strict=True):
            sizes[layer] += math.prod(shape)
        return sizes

    def mean_squares(self, tensors: Sequence[Tensor]) -> Tensor:
        """Per group, the mean of the squared coordinates of `tensors` (aligned with the parameters), float64."""
        if self.granularity == "coordinate":
            return torch.cat([t.detach().reshape(-1).double().square() for t in tensors])
        sums = torch.zeros(self.groups, dtype=torch.float64, device=self.device)
        for t, layer in zip(tensors, self.param_layers, strict=True):
            sums[layer] += t.detach().double().square().sum()
        return sums / self.sizes()

    def per_param(self, group_weights: Tensor, dtype: torch.dtype) -> list[Tensor]:
        """The weights of each parameter: 0-d (one per layer) or of the parameter's shape."""
        if self.granularity == "layer":
            cast = group_weights.to(dtype)
            return [cast[layer] for layer in self.param_layers]
        parts = group_weights.to(dtype).split([math.prod(s) for s in self.shapes])
        return [part.view(shape) for part, shape in zip(parts, self.shapes, strict=True)]


class ReleasedGradientWeights:
    """W, a function of public numbers and the released noisy updates only.

    `observe` is the only way information comes in, and it takes nothing but a release (the noisy
    update ĝ that the optimizer is handed, which DP-SGD's accounting already charges for) and public
    numbers (σC and L of that step); the weights it had when the release was made are its own state,
    itself a function of earlier releases. So W at step t is post-processing of releases 1…t−1."""

    def __init__(
        self,
        layout: WeightLayout,
        *,
        smoothing: float = DEFAULT_SMOOTHING,
        max_ratio: float = DEFAULT_MAX_RATIO,
        warmup: int = WARMUP_STEPS,
    ):
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.layout, self.smoothing, self.max_ratio, self.warmup = layout, smoothing, max_ratio, warmup
        self.sizes = layout.sizes()
        self.group_weights = torch.ones(layout.groups, dtype=torch.float64, device=layout.device)
        self.mean_square = torch.zeros_like(self.group_weights)  # EMA of ĝ², per group
        self.noise_variance = torch.zeros_like(self.group_weights)  # EMA of the noise variance of ĝ, per group
        self.observed = 0

    def observe(self, released: Sequence[Tensor], *, noise_std: float, lot_size: int) -> None:
        """Fold in one released update ĝ (noise σC·W z, divided by L); `noise_std` = σC, `lot_size` = L."""
        beta = self.smoothing
        variance = (noise_std / lot_size) ** 2 * self.group_weights.square()
        self.mean_square.mul_(beta).add_(self.layout.mean_squares(released), alpha=1 - beta)
        self.noise_variance.mul_(beta).add_(variance, alpha=1 - beta)
        self.observed += 1
        if self.observed >= self.warmup:
            estimate = sensitivity_estimate(self.mean_square, self.noise_variance, self.sizes, self.smoothing)
            self.group_weights = weights_from_sensitivity(estimate, self.sizes, self.max_ratio)

    def per_param(self, dtype: torch.dtype) -> list[Tensor]:
        return self.layout.per_param(self.group_weights, dtype)

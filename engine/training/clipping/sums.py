"""The clipped sum Σᵢ clip(gᵢ) and its arithmetic, shared by every clipper: the clip factors
cᵢ = min(1, C/‖gᵢ‖₂) (exact in floating point), thresholds per layer whose squares sum to C², per-layer
norms combined into one, the empty lot, and the BatchNorm refusal. The clippers are `bookkeeping`,
`materialized`, the stacked one (`engine.training.trainers.stack.clipping`) and the weighted one of
anisotropic DP-SGD (`engine.training.algorithms.aniso`); the per-layer rules they share are `rules`."""

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

ConvNormMethod = Literal["auto", "ghost", "materialize"]
ClipNorm = float | Sequence[float]


class UnsupportedModelError(ValueError):
    """The model has a layer this clipper cannot compute per-example norms for."""


class BatchNormError(UnsupportedModelError):
    """The model has a BatchNorm layer: no clipper can bound one example's influence through it."""


@dataclass(frozen=True)
class ClippedSum:
    grads: list[Tensor]  # aligned with the clipper's `params`
    norms: Tensor  # (B,) total per-example gradient norms before clipping (computed on private data)
    loss_sum: Tensor  # Σᵢ ℓᵢ over the lot, detached
    clipped: Tensor  # (B,) bool: whether clipping scaled any part of that example's gradient down
    correct: Tensor | None = None  # () examples whose logits put the true class first (private diagnostic)


def row_sq_norms(matrix: Tensor) -> Tensor:
    """‖row‖² of each row; the fused norm kernel avoids a B×d temporary (≈10× faster than pow+sum)."""
    return torch.linalg.vector_norm(matrix, dim=1).square()


@functools.lru_cache(maxsize=256)
def safe_thresholds(clip_norms: tuple[float, ...], dtype: torch.dtype) -> tuple[float, ...]:
    """Each C rounded down to `dtype`, then shrunk by two machine epsilons: C⁻ ≤ C·(1 − 4u)(1 + u).

    Whether c = C⁻/n is computed with one rounding or as two (reciprocal, then product: what a
    Python-scalar division does), c ≤ (C⁻/n)(1 + u)², so c·n ≤ C(1 − 4u)(1 + u)³ < C and the rounded
    product fl(c·n) ≤ C as well. Every C⁻ is exactly representable in `dtype` (no rounding on use)."""
    exact = torch.tensor(clip_norms, dtype=torch.float64)
    rounded = exact.to(dtype)
    rounded = torch.where(rounded.double() > exact, torch.nextafter(rounded, torch.zeros_like(rounded)), rounded)
    return tuple((rounded * (1 - 2 * torch.finfo(dtype).eps)).tolist())


def clip_factors(norms: Tensor, clip_norm: float | Sequence[float]) -> Tensor:
    """cᵢ = min(1, C/‖gᵢ‖), with cᵢ·‖gᵢ‖ ≤ C exactly in floating point, and ‖gᵢ‖ = 0 giving 1.

    A plain fl(C/n)·n rounds to just above C for about one n in eight (unless C is a power of two),
    so C is shrunk by a few ulps first (`safe_thresholds`): a factor is smaller than the exact
    min(1, C/n) by at most 5 units in the last place, and two cheap kernels compute it. With one
    threshold per column (`clip_norm` a sequence, `norms` of shape (B, K)) each column is clipped
    to its own threshold (per-layer clipping)."""
    if isinstance(clip_norm, float | int):
        return (safe_thresholds((float(clip_norm),), norms.dtype)[0] / norms).clamp_(max=1.0)
    safe = constant_tensor(safe_thresholds(tuple(clip_norm), norms.dtype), norms.dtype, norms.device)
    return torch.div(safe, norms).clamp_(max=1.0)


@functools.lru_cache(maxsize=256)
def constant_tensor(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """A small tensor of public constants, made once per (values, dtype, device): no host-to-device copy per
    step. Callers must not write to it."""
    return torch.tensor(values, dtype=dtype, device=device)


def per_layer_thresholds(clip_norm: float, n_layers: int) -> tuple[float, ...]:
    """Equal per-layer thresholds C/√K whose squares sum to at most C² (so a clipped per-example
    gradient still has total norm ≤ C and the accounting is that of flat clipping at C)."""
    if n_layers < 1:
        raise ValueError(f"per-layer clipping needs at least one layer, got {n_layers}")
    each = clip_norm / math.sqrt(n_layers)
    while each > 0 and Fraction(each) ** 2 * n_layers > Fraction(clip_norm) ** 2:  # exact: never round C up
        each = math.nextafter(each, 0.0)
    return (each,) * n_layers


def check_clip_norm(clip_norm: ClipNorm, layer_names: list[str]) -> float | tuple[float, ...]:
    """A positive float (flat clipping) or one positive float per layer (per-layer clipping)."""
    if type(clip_norm) is float and 0.0 < clip_norm < math.inf:  # the common case, cheaply
        return clip_norm
    if isinstance(clip_norm, Real) and not isinstance(clip_norm, bool):
        values: tuple[float, ...] = (float(clip_norm),)
    else:
        values = tuple(float(c) for c in clip_norm)
        if len(values) != len(layer_names):
            raise ValueError(
                f"per-layer clipping needs {len(layer_names)} thresholds, one per layer "
                f"({', '.join(layer_names)}); got {len(values)}"
            )
    if not all(0.0 < c < math.inf for c in values):
        raise ValueError(f"clipping thresholds must be positive and finite, got {clip_norm!r}")
    return values[0] if isinstance(clip_norm, Real) else values


def check_multiplicity(multiplicity: int, rows: int) -> int:
    """K ≥ 1 augmented copies per example (De et al. 2022, §3.1), and rows that are whole groups of K copies."""
    if isinstance(multiplicity, bool) or not isinstance(multiplicity, int) or multiplicity < 1:
        raise ValueError(f"multiplicity must be an integer ≥ 1 (copies per example), got {multiplicity!r}")
    if rows % multiplicity:
        raise ValueError(f"{rows} rows are not whole groups of {multiplicity} copies per example")
    return multiplicity


def reject_batchnorm(model: nn.Module) -> None:
    for name, module in model.named_modules():
        if isinstance(module, _BatchNorm) or "BatchNorm" in type(module).__name__:
            where = f"layer {name!r}" if name else "the model"
            raise BatchNormError(
                f"{where} is a {type(module).__name__}: BatchNorm mixes examples (it normalizes each one with "
                "statistics of the whole batch), which breaks per-example clipping and so the privacy guarantee; "
                "use GroupNorm or LayerNorm, or no normalization"
            )


def refuse_forward_hooks(layers: list[nn.Module], names: list[str]) -> None:
    """A forward hook may replace a layer's output, which its rule (output = the stock layer's) would not see: the
    norms, and so the clipping, would be of another gradient. The clipper registers its own hooks only while it
    runs the model."""
    hooked = [name for name, layer in zip(names, layers, strict=True) if layer._forward_hooks]
    if hooked:
        raise UnsupportedModelError(
            f"layer(s) {', '.join(map(repr, hooked))} have forward hooks, which may change what a layer outputs and so "
            "its per-example gradients; remove them before clipping"
        )


def combine_layer_norms(
    layer_sq_norms: list[Tensor], clip_norm: float | tuple[float, ...]
) -> tuple[Tensor, list[Tensor], Tensor]:
    """(total norms, clip factors per layer, clipped flags) from per-layer squared norms, each (B,)."""
    if isinstance(clip_norm, float):
        total = layer_sq_norms[0]
        for sq in layer_sq_norms[1:]:
            total = total + sq
        norms = total.sqrt()
        return norms, [clip_factors(norms, clip_norm)] * len(layer_sq_norms), norms > clip_norm
    layer_norms = torch.stack(layer_sq_norms, dim=1).sqrt()  # (B, K)
    factors = clip_factors(layer_norms, clip_norm)
    clipped = (layer_norms > constant_tensor(clip_norm, layer_norms.dtype, layer_norms.device)).any(dim=1)
    return torch.linalg.vector_norm(layer_norms, dim=1), list(factors.T), clipped


def zero_sum(params: list[Tensor], x: Tensor, loss_sum: Tensor | None = None) -> ClippedSum:
    """An empty lot, or a model with nothing to train: zero gradients, zero norms, nothing clipped."""
    dtype = params[0].dtype if params else x.dtype
    return ClippedSum(
        grads=[torch.zeros_like(p) for p in params],
        norms=torch.zeros(len(x), device=x.device, dtype=dtype),
        loss_sum=torch.zeros((), device=x.device, dtype=dtype) if loss_sum is None else loss_sum,
        clipped=torch.zeros(len(x), device=x.device, dtype=torch.bool),
    )


def count_correct(logits: Tensor, y: Tensor, row_mask: Tensor | None = None) -> Tensor:
    """How many rows of `logits` (…, B, classes) rank the true class first (of the rows `row_mask` keeps, if given):
    a by-product of the step's forward pass. One count for (B, classes), one per member for a stack's (K, B,
    classes)."""
    hits = logits.detach().argmax(dim=-1) == y
    return (hits if row_mask is None else hits & (row_mask > 0)).sum(dim=-1)

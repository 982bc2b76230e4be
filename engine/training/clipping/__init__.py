"""Per-example gradient clipping: the clipped *sum* Σᵢ clip(gᵢ) over a lot.

Flat clipping (one threshold C) scales each per-example gradient by cᵢ = min(1, C/‖gᵢ‖₂). Per-layer
clipping (thresholds C₁…C_K, one per parametrized layer) scales layer k's part of gᵢ (weight and
bias together) by min(1, C_k/‖gᵢₖ‖); a whole per-example gradient then has norm ≤ √(Σₖ C_k²), which
is the sensitivity to calibrate the noise to (`per_layer_thresholds` splits C so that it is C).

`BookKeepingClipper` (`bookkeeping`; ghost norm + book-keeping; Li et al. 2022, Bu et al. 2023) never builds the
per-example gradients of a linear layer. One forward pass stores each layer's input a; the gradient
of Σℓ at the logits is written out (softmax − one-hot), and one backward pass from the logits to
the layer *outputs* yields every δ = ∂Σℓ/∂z (δᵢ depends on example i alone, as no layer mixes
examples; a model that is one linear layer needs no backward pass at all). Then per layer:

- ``nn.Linear`` z = a·Wᵀ + b on a 2-D input: gᵢ = δᵢ aᵢᵀ, so ‖gᵢ‖² = ‖aᵢ‖²·‖δᵢ‖² (+ ‖δᵢ‖² for the
  bias), and the clipped sum is one matmul: Σᵢ cᵢ δᵢ aᵢᵀ = (c⊙δ)ᵀ a.
- ``nn.Conv2d`` (groups = 1, any stride, padding, dilation and padding mode): with Uᵢ the unfolded
  input (D × P, D = C_in·kh·kw, P output positions; `conv_patches`) and δᵢ as C_out × P, the
  weight gradient is Gᵢ = δᵢ Uᵢᵀ (C_out × D). Its norm comes one of two ways (`conv_norm_method`
  picks by multiply-adds per example, the rule of Bu et al. 2023's mixed ghost clipping):

  * ghost norm, ‖Gᵢ‖²_F = Σ_{p,p'} (UᵢᵀUᵢ)_{pp'} (δᵢᵀδᵢ)_{pp'}: P²·(D + C_out), memory B·P²;
  * materialized, Gᵢ for all i by one batched matmul: P·D·C_out, memory B·C_out·D.

  The bias gradient is Σ_p δᵢ[:, p]. The clipped weight sum is one contraction per layer with the
  clip factors folded in: Σᵢ cᵢ Gᵢ = c·G (B·C_out·D multiply-adds) when G is materialized, else
  Σᵢ cᵢ δᵢ Uᵢᵀ as a single (C_out × B·P)·(B·P × D) matmul over all positions of all examples.

- ``nn.GroupNorm`` with affine parameters and `engine.training.models.layers.WeightStandardizedConv2d`
  (`normalization_rules`): per-example γ, β gradients Σ δ ⊙ x̂, Σ δ kept as they are; the standardized conv's
  gradients with respect to Ŵ materialized, then mapped back through the standardization's Jacobian (the same
  for every example). These have no rule for a stack of models.

Augmentation multiplicity (De et al. 2022, §3.1): `clipped_sum(x, y, C, multiplicity=K)` takes K augmented
copies of each example (B·K rows, example-major) and clips each example's *mean* gradient over its copies,
gᵢ = (1/K)Σₖ ∇ℓᵢₖ, as one example, so one example still moves the sum by at most C. The book-keeping clipper
scales the logits' gradient by 1/K and treats the copies as K more positions of one example (`rules`), at about
the cost of a step on B·K rows; the materialized one averages the copies' per-row gradients.

Layers without parameters (activations, pooling, flatten, GroupNorm/LayerNorm without affine
parameters) need nothing. A trainable parameter outside a supported layer, or a forward hook on a
supported one (it may replace the layer's output, which the layer's rule would not see), raises
`UnsupportedModelError` and `make_clipper` falls back to `MaterializedClipper` (`materialized`), the generic
path: per-example gradients from `torch.func` (`vmap(grad(...))`) at the cost of B copies of the gradient.

BatchNorm is refused by both (`BatchNormError`, which `make_clipper` does not fall back from): it
normalizes each example with statistics of the whole batch, so an example's output, loss and
gradient depend on the other examples and clipping per example no longer bounds one example's
influence.

The package: `sums` (the clipped sum, clip factors and thresholds), `rules` (the per-layer rules, registered
once and shared by the book-keeping, stacked and anisotropic clippers), `normalization_rules` (GroupNorm and
weight-standardized conv, registered in the same registry), `bookkeeping`, `materialized`.
"""

from torch import nn

from engine.training.clipping import normalization_rules  # noqa: F401 (registers the GroupNorm and WS-conv rules)
from engine.training.clipping.bookkeeping import BookKeepingClipper
from engine.training.clipping.materialized import MaterializedClipper
from engine.training.clipping.rules import conv_norm_method, conv_patches
from engine.training.clipping.sums import (
    BatchNormError,
    ClipNorm,
    ClippedSum,
    UnsupportedModelError,
    clip_factors,
    constant_tensor,
    count_correct,
    per_layer_thresholds,
    row_sq_norms,
)


def make_clipper(model: nn.Module) -> BookKeepingClipper | MaterializedClipper:
    """The fastest exact clipper for this model; BatchNorm raises `BatchNormError` (no fallback)."""
    try:
        return BookKeepingClipper(model)
    except BatchNormError:
        raise
    except UnsupportedModelError:
        return MaterializedClipper(model)


__all__ = [
    "BatchNormError",
    "BookKeepingClipper",
    "ClipNorm",
    "ClippedSum",
    "MaterializedClipper",
    "UnsupportedModelError",
    "clip_factors",
    "constant_tensor",
    "conv_norm_method",
    "conv_patches",
    "count_correct",
    "make_clipper",
    "per_layer_thresholds",
    "row_sq_norms",
]

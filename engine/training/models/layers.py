"""Layers of the lab's own that the stock ones lack, each with a book-keeping clipping rule
(`engine.training.clipping.rules`), so models built from them clip without per-example gradients.

`WeightStandardizedConv2d` (Qiao et al. 2019, "Micro-Batch Training with Batch-Channel Normalization and Weight
Standardization"; used with group normalization in the wide ResNets of De et al. 2022, "Unlocking High-Accuracy
Differentially Private Image Classification through Scale"): each output filter's weights are centred and scaled to
unit norm before the convolution,

    Ŵ_o = (W_o − mean(W_o)) / √(‖W_o − mean(W_o)‖² + ε)

over the filter's D = C_in·kh·kw weights (the same as dividing by the standard deviation times √D, NF-Nets' form
without its gain). The standardization uses the weights only, never the data, so the layer mixes no examples: an
example's gradient is Jᵀ·(its gradient with respect to Ŵ), J being the standardization's Jacobian at W, the same
for every example.
"""

import torch
from torch import Tensor, nn

STANDARDIZATION_EPS = 1e-4


def standardize_filters(weight: Tensor, eps: float = STANDARDIZATION_EPS) -> Tensor:
    """Ŵ: each output filter (weight[o]) centred and scaled to norm √(‖·‖²/(‖·‖² + ε)) ≈ 1."""
    centred = weight - weight.mean(dim=(1, 2, 3), keepdim=True)
    return centred * torch.rsqrt(centred.square().sum(dim=(1, 2, 3), keepdim=True) + eps)


class WeightStandardizedConv2d(nn.Conv2d):
    """nn.Conv2d whose filters are standardized on every call (`standardize_filters`); groups must be 1."""

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, standardize_filters(self.weight), self.bias)


__all__ = ["STANDARDIZATION_EPS", "WeightStandardizedConv2d", "standardize_filters"]

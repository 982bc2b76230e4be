"""Book-keeping rules for normalization layers with parameters (one model only: no stacked rule, so the stacked
clipper refuses models with them), registered in `rules.RULES` like the others:

- ``nn.GroupNorm`` with affine parameters, z = γ ⊙ x̂ + β per channel, x̂ the input normalized over each
  example's groups (no statistics cross examples, unlike BatchNorm). With δ = ∂Σℓ/∂z (B, C, positions),
  example i's gradients are ∇γ = Σ_positions δᵢ ⊙ x̂ᵢ and ∇β = Σ_positions δᵢ, both (C,): per-example vectors
  small enough to keep, so the norms and the clipped sums c·∇γ, c·∇β are direct. x̂ is recomputed from the
  captured input (`F.group_norm` without the affine part). With K copies per example, their sums add.
- `engine.training.models.layers.WeightStandardizedConv2d`: the convolution runs with Ŵ = standardize(W), so an
  example's gradient with respect to the raw weight is Jᵀ·Gᵢ', with Gᵢ' = δᵢUᵢᵀ its gradient with respect to Ŵ
  (materialized, as the conv rule's "materialize" branch does) and J the standardization's Jacobian, the same for
  every example. Per filter o, with v the centred filter and s = (‖v‖² + ε)^(−½), so that ŵ = s·v,

      Jᵀg = s·(g − mean(g)) − s³·(v·g)·v

  (dŵ = (sI − s³vvᵀ)·P·dw, P the centring projection, both symmetric, and Pv = v). It is applied to every
  example's Gᵢ' in place (`standardization_transpose`); the norms are those of JᵀGᵢ', and the clipped sum is
  Σᵢ cᵢ JᵀGᵢ' = Jᵀ(Σᵢ cᵢGᵢ'), one (B)·(B, C_out·D) product. The bias is as in nn.Conv2d."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.training.clipping.rules import (
    LayerRule,
    Workspace,
    conv_patches,
    copies_as_positions,
    fresh_workspace,
    register,
    sum_copies,
    trains,
    weight_layout,
)
from engine.training.clipping.sums import UnsupportedModelError, row_sq_norms
from engine.training.models.layers import STANDARDIZATION_EPS, WeightStandardizedConv2d


def group_norm_norms_and_sum(module: nn.GroupNorm, a: Tensor, delta: Tensor, *, multiplicity: int = 1, **_options):
    """nn.GroupNorm (affine): per-example ∇γ = Σ δ ⊙ x̂ and ∇β = Σ δ over positions (and copies), their squared
    norms, and finish(c) = [c·∇γ, c·∇β] as trained."""
    train_w, train_b = trains(module)
    rows, channels = delta.shape[:2]
    d = delta.reshape(rows, channels, -1)  # (B·K, C, positions)
    per_example = []
    if train_w:
        normalized = F.group_norm(a, module.num_groups, eps=module.eps).reshape(rows, channels, -1)
        per_example.append(sum_copies(torch.linalg.vecdot(d, normalized), multiplicity))  # ∇γ: (B, C)
    if train_b:
        per_example.append(sum_copies(d.sum(dim=2), multiplicity))  # ∇β: (B, C)
    sq = row_sq_norms(per_example[0])
    for g in per_example[1:]:
        sq = sq + row_sq_norms(g)

    def finish(c: Tensor) -> list[Tensor]:
        return [c @ g for g in per_example]

    return sq, finish


def standardization_transpose(weight: Tensor, grads: Tensor, eps: float = STANDARDIZATION_EPS) -> Tensor:
    """Jᵀ applied, in place, to gradients with respect to the standardized filters, `grads` (B, C_out, D) with D
    in `conv_patches` order (kh, kw, C_in): the gradients with respect to the raw `weight` (C_out, C_in, kh, kw)."""
    c_out = weight.shape[0]
    centred = weight - weight.mean(dim=(1, 2, 3), keepdim=True)
    scale = torch.rsqrt(centred.square().sum(dim=(1, 2, 3)) + eps)  # s per filter: (C_out,)
    v = centred.permute(0, 2, 3, 1).reshape(c_out, -1)  # in patches order
    along = torch.linalg.vecdot(grads, v) * scale.pow(3)  # s³(v·g): (B, C_out)
    grads.sub_(grads.mean(dim=2, keepdim=True)).mul_(scale[:, None])
    return grads.addcmul_(along[:, :, None], v, value=-1.0)


def standardized_conv_norms_and_sum(
    module: WeightStandardizedConv2d,
    a: Tensor,
    delta: Tensor,
    *,
    workspace: Workspace | None = None,
    multiplicity: int = 1,
    **_options,
):
    """WeightStandardizedConv2d: ‖JᵀGᵢ'‖² with Gᵢ' = δᵢUᵢᵀ materialized (over K·P positions with K copies), plus
    the bias's ‖Σ_p δᵢ[:, p]‖²; finish(c) = [Jᵀ(Σᵢ cᵢGᵢ'), Σᵢ cᵢ ∇bᵢ] as trained."""
    workspace = workspace or fresh_workspace(a)
    train_w, train_b = trains(module)
    rows, c_out = delta.shape[:2]
    batch = rows // multiplicity
    d = delta.reshape(rows, c_out, -1)  # (B·K, C_out, P)
    sq = torch.zeros(batch, device=delta.device, dtype=delta.dtype)
    if train_w:
        u = conv_patches(module, a, workspace("patches"))  # (B·K, P, D)
        if u.shape[1] != d.shape[2]:
            raise UnsupportedModelError(f"conv layer output has {d.shape[2]} positions, its patches {u.shape[1]}")
        d_ex, u_ex = copies_as_positions(d, u, multiplicity)
        standardized = torch.bmm(d_ex, u_ex, out=workspace("grads")((batch, c_out, u.shape[2])))  # Gᵢ'
        per_example_w = standardization_transpose(module.weight.detach(), standardized).view(batch, -1)
        sq = row_sq_norms(per_example_w)
    bias_per_example = sum_copies(d.sum(dim=2), multiplicity) if train_b else None  # (B, C_out)
    if bias_per_example is not None:
        sq = sq + row_sq_norms(bias_per_example)

    def finish(c: Tensor) -> list[Tensor]:
        out = [weight_layout(module, c @ per_example_w)] if train_w else []
        return [*out, c @ bias_per_example] if bias_per_example is not None else out

    return sq, finish


register(
    LayerRule(
        layer=nn.GroupNorm,
        supports=lambda m: type(m).forward is nn.GroupNorm.forward and m.affine,
        single=group_norm_norms_and_sum,
        stacked=None,
        input_dims=(2, 3, 4),
    )
)
register(
    LayerRule(
        layer=WeightStandardizedConv2d,
        supports=lambda m: type(m).forward is WeightStandardizedConv2d.forward and m.groups == 1,
        single=standardized_conv_norms_and_sum,
        stacked=None,
        input_dims=(4,),
    )
)

"""The per-layer rules of book-keeping clipping: for each kind of layer, the per-example squared
gradient norms ‖gᵢ‖² from the layer's input a and output gradient δ = ∂Σℓ/∂z, and the clipped sum
Σᵢ cᵢgᵢ once the clip factors c are known, never a per-example gradient of a linear layer. Each kind
is registered once (`RULES`) with a rule for one model (`BookKeepingClipper`, the weighted clipper of
anisotropic DP-SGD) and one for K stacked models (`StackedClipper`); the derivations are in the
package's docstring (`engine.training.clipping`).

A rule returns (squared norms, finish), where finish(c) gives the clipped sums of the layer's trainable
parameters: a list (weight, then bias) for one model, a dict by parameter name for a stack.

Augmentation multiplicity (De et al. 2022, §3.1; one model only): with `multiplicity` K > 1 the layer saw
B·K rows, example-major (rows iK … iK+K−1 are example i's K augmented copies), and example i's gradient is
the mean of its copies', gᵢ = (1/K)Σₖ ∇ℓᵢₖ. The clipper scales the logits' gradient by 1/K, so the δ a rule
gets already carry it and gᵢ is the plain *sum* of the copies' gradients: the K copies are K more
"positions" of one example. An nn.Linear layer's Gᵢ = Σₖ δᵢₖaᵢₖᵀ is that of a sequence of K positions; a
conv layer's patches (B·K, P, D) view as (B, K·P, D) and its δ (B·K, C_out, P) regroup as (B, C_out, K·P)
(`copies_as_positions`), and the ghost norm or the materialized Gᵢ then runs over K·P positions
(`conv_norm_method` picks by the same count; for nn.Linear: ghost K²(d + p) against materialized K·p·d
multiply-adds per example). Norms come out per example (B,), and finish(c) takes one factor per example:
being linear in c, it may run at row level with each cᵢ repeated for its copies (`per_row`). K = 1 is the
plain computation, unchanged.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.training.clipping.sums import ConvNormMethod, UnsupportedModelError, row_sq_norms

Workspace = Callable[[str], Callable[[tuple[int, ...]], Tensor]]  # role → (shape → scratch tensor)


def _padded(module: nn.Conv2d, a: Tensor) -> Tensor:
    """The input with the layer's padding applied explicitly (any padding mode, 'same' and 'valid' too)."""
    if module.padding == "valid":
        return a
    if isinstance(module.padding, str):  # 'same': total d·(k−1) per dimension, the odd one on the right/bottom
        pads = []
        for d, k in zip(reversed(module.dilation), reversed(module.kernel_size), strict=True):
            total = d * (k - 1)
            pads += [total // 2, total - total // 2]
    else:
        pads = [p for p in reversed(module.padding) for _ in range(2)]
    if not any(pads):
        return a
    return F.pad(a, pads, mode="constant" if module.padding_mode == "zeros" else module.padding_mode)


def conv_patches(module: nn.Conv2d, a: Tensor, workspace: Callable[[tuple[int, ...]], Tensor] | None = None) -> Tensor:
    """Uᵢᵀ of every example, (B, P, D): row p holds the receptive field of output position p.

    D is ordered (kh, kw, C_in), channels last, unlike `F.unfold`'s (C_in, kh, kw): on a channels-last
    copy of the input every kernel row is then one contiguous run of kw·C_in values, which makes this
    gather several times faster than `F.unfold` for multi-channel inputs, and (B, P, D) lets the
    clipped sum contract over B·P without another copy. Weight gradients in this order go back to
    (C_out, C_in, kh, kw) with `weight_layout`. `workspace(shape)`, if given, supplies the
    (contiguous) tensor to write into."""
    x = _padded(module, a).permute(0, 2, 3, 1)  # (B, H, W, C) view
    if not x.is_contiguous():
        x = x.contiguous()
    batch, height, width, channels = x.shape
    (kh, kw), (sh, sw), (dh, dw) = module.kernel_size, module.stride, module.dilation
    out_h, out_w = (height - dh * (kh - 1) - 1) // sh + 1, (width - dw * (kw - 1) - 1) // sw + 1
    s_b, s_h, s_w, s_c = x.stride()
    shape = (batch, out_h, out_w, kh, kw, channels)
    windows = x.as_strided(shape, (s_b, sh * s_h, sw * s_w, dh * s_h, dw * s_w, s_c))
    if workspace is None:
        return windows.reshape(batch, out_h * out_w, kh * kw * channels)
    return workspace(shape).copy_(windows).view(batch, out_h * out_w, kh * kw * channels)


def conv_norm_method(module: nn.Conv2d, output_positions: int) -> Literal["ghost", "materialize"]:
    """The cheaper way to the per-example weight-gradient norms of a conv layer, by multiply-adds per
    example: the ghost norm's two P × P Gram matrices, P²·(D + C_out), against materializing
    Gᵢ = δᵢUᵢᵀ, P·D·C_out (Bu et al. 2023: ghost iff 2T² < pd for T positions, p·d weights).

    Ghost wins when the output is small relative to the layer (late, wide layers) and also needs less
    memory there (B·P² against B·C_out·D). The clipped sum is not counted: the ghost branch then pays
    a B·P·D·C_out matmul that the materialized one replaces by c·G, so near a tie (the MNIST CNN's
    second layer: 180k against 205k) either can be faster in practice, depending on B and the BLAS."""
    p = output_positions
    d = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
    return "ghost" if p * p * (d + module.out_channels) < p * d * module.out_channels else "materialize"


def weight_layout(module: nn.Conv2d, grad: Tensor, members: int | None = None) -> Tensor:
    """A weight gradient with columns in `conv_patches` order (C_out, kh·kw·C_in) → (C_out, C_in, kh, kw); with
    `members`, K of them stacked (K, C_out, kh·kw·C_in) → (K, C_out, C_in, kh, kw)."""
    c_out, c_in, kh, kw = module.weight.shape
    leading = () if members is None else (members,)
    return grad.reshape(*leading, c_out, kh, kw, c_in).movedim(-1, -3).contiguous()


def fresh_workspace(like: Tensor) -> Workspace:
    """Scratch tensors allocated anew on every call (callers that keep none between steps)."""
    return lambda role: lambda shape: torch.empty(math.prod(shape), dtype=like.dtype, device=like.device).view(shape)


def trains(module: nn.Module) -> tuple[bool, bool]:
    """Whether the layer's weight and its bias are trained."""
    return module.weight.requires_grad, module.bias is not None and module.bias.requires_grad


def per_row(c: Tensor, multiplicity: int) -> Tensor:
    """One clip factor per example (B,) → one per row (B·K,): each example's factor for each of its copies."""
    return c if multiplicity == 1 else c.repeat_interleave(multiplicity)


def sum_copies(rows: Tensor, multiplicity: int) -> Tensor:
    """(B·K, ...) per-row values → (B, ...) per-example sums over each example's K copies."""
    return rows if multiplicity == 1 else rows.view(-1, multiplicity, *rows.shape[1:]).sum(dim=1)


def copies_as_positions(d: Tensor, u: Tensor, multiplicity: int) -> tuple[Tensor, Tensor]:
    """A conv layer's δ (B·K, C_out, P) and patches (B·K, P, D) with each example's K copies as K·P positions of
    one example: (B, C_out, K·P) (a copy) and (B, K·P, D) (a view). The same tensors when K = 1."""
    if multiplicity == 1:
        return d, u
    rows, c_out, positions = d.shape
    batch = rows // multiplicity
    grouped = d.view(batch, multiplicity, c_out, positions).transpose(1, 2).reshape(batch, c_out, -1)
    return grouped, u.view(batch, multiplicity * positions, u.shape[2])


def position_norms(
    d: Tensor, u: Tensor, *, materialize: bool, out: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """‖Gᵢ‖² of Gᵢ = δᵢUᵢᵀ summed over positions, from δ (B, C_out, T) and Uᵀ (B, T, D): materialized by one
    batched matmul (into `out`, if given), returning Gᵢ flattened (B, C_out·D) too, or by the ghost norm
    ⟨UᵢᵀUᵢ, δᵢᵀδᵢ⟩ over T × T (then None). A conv layer's positions are its output positions (times K copies);
    a linear layer's are an example's K copies."""
    batch = d.shape[0]
    if materialize:
        per_example = torch.bmm(d, u, out=out).view(batch, -1)
        return row_sq_norms(per_example), per_example
    gram_u = torch.bmm(u, u.transpose(1, 2))
    gram_d = torch.bmm(d.transpose(1, 2), d)
    return torch.linalg.vecdot(gram_u.view(batch, -1), gram_d.view(batch, -1)), None


# ------------------------------------------------------------------------------ one model


def linear_norms_and_sum(module: nn.Linear, a: Tensor, delta: Tensor, *, multiplicity: int = 1, **_options):
    """nn.Linear: ‖gᵢ‖² = ‖aᵢ‖²·‖δᵢ‖² (+ ‖δᵢ‖² for the bias), and finish(c) = [(c⊙δ)ᵀa, Σᵢ cᵢδᵢ] as trained.
    With K > 1 copies per example, `grouped_linear_norms_and_sum`."""
    if multiplicity > 1:
        return grouped_linear_norms_and_sum(module, a, delta, multiplicity)
    train_w, train_b = trains(module)
    delta_sq = row_sq_norms(delta)
    if train_w and train_b:
        sq = torch.addcmul(delta_sq, row_sq_norms(a), delta_sq)
    elif train_w:
        sq = row_sq_norms(a) * delta_sq
    else:
        sq = delta_sq

    def finish(c: Tensor) -> list[Tensor]:
        weighted = delta * c[:, None]
        out = [weighted.T @ a] if train_w else []
        return [*out, weighted.sum(dim=0)] if train_b else out

    return sq, finish


def grouped_linear_norms_and_sum(module: nn.Linear, a: Tensor, delta: Tensor, multiplicity: int):
    """nn.Linear with K copies per example (rows B·K): Gᵢ = Σₖ δᵢₖaᵢₖᵀ, whose norm is the ghost norm over K
    positions, ⟨AᵢAᵢᵀ, ΔᵢΔᵢᵀ⟩ (K²(d + p) multiply-adds), or that of Gᵢ materialized by one batched matmul
    (K·p·d), whichever is fewer; the bias's is ‖Σₖ δᵢₖ‖². finish(c): Σᵢ cᵢGᵢ at row level, c repeated per copy,
    or c·G when G was materialized."""
    train_w, train_b = trains(module)
    rows, p = delta.shape
    batch, d = rows // multiplicity, a.shape[1]
    deltas, inputs = delta.view(batch, multiplicity, p), a.view(batch, multiplicity, d)
    sq = torch.zeros(batch, dtype=delta.dtype, device=delta.device)
    materialize = multiplicity * (d + p) >= p * d
    if train_w:  # each example's K copies as K positions
        sq, per_example_w = position_norms(deltas.transpose(1, 2), inputs, materialize=materialize)
    bias_per_example = deltas.sum(dim=1) if train_b else None  # (B, p)
    if bias_per_example is not None:
        sq = sq + row_sq_norms(bias_per_example)

    def finish(c: Tensor) -> list[Tensor]:
        out = []
        if train_w and materialize:
            out.append((c @ per_example_w).view(p, d))
        elif train_w:
            out.append((delta * per_row(c, multiplicity)[:, None]).T @ a)
        return [*out, c @ bias_per_example] if bias_per_example is not None else out

    return sq, finish


def conv_norms_and_sum(
    module: nn.Conv2d,
    a: Tensor,
    delta: Tensor,
    *,
    workspace: Workspace | None = None,
    conv_norms: ConvNormMethod = "auto",
    multiplicity: int = 1,
):
    """nn.Conv2d (groups 1): ‖Gᵢ‖² by the ghost norm or by materializing Gᵢ = δᵢUᵢᵀ (`conv_norm_method`, or
    `conv_norms` to force one), plus the bias's ‖Σ_p δᵢ[:, p]‖²; finish(c) folds c into one contraction.
    `workspace(role)` supplies the scratch tensors ("patches", "grads"). With K copies per example, the copies
    are K·P positions of one example (`copies_as_positions`)."""
    workspace = workspace or fresh_workspace(a)
    train_w, train_b = trains(module)
    rows, c_out = delta.shape[:2]
    batch = rows // multiplicity
    d = delta.reshape(rows, c_out, -1)  # δ of each row: (B·K, C_out, P)
    sq = None
    if train_w:
        u = conv_patches(module, a, workspace("patches"))  # Uᵀ of each row: (B·K, P, D)
        if u.shape[1] != d.shape[2]:
            raise UnsupportedModelError(f"conv layer output has {d.shape[2]} positions, its patches {u.shape[1]}")
        d_ex, u_ex = copies_as_positions(d, u, multiplicity)  # δᵢ: (B, C_out, K·P), Uᵢᵀ: (B, K·P, D)
        method = conv_norms if conv_norms != "auto" else conv_norm_method(module, d_ex.shape[2])
        grads = workspace("grads")((batch, c_out, u.shape[2])) if method == "materialize" else None
        sq, per_example_w = position_norms(d_ex, u_ex, materialize=method == "materialize", out=grads)
    bias_per_example = sum_copies(d.sum(dim=2), multiplicity) if train_b else None  # (B, C_out)
    if bias_per_example is not None:
        sq = row_sq_norms(bias_per_example) if sq is None else sq + row_sq_norms(bias_per_example)
    if sq is None:
        sq = torch.zeros(batch, device=delta.device, dtype=delta.dtype)

    def finish(c: Tensor) -> list[Tensor]:
        out = []
        if train_w:
            if method == "materialize":  # Σᵢ cᵢGᵢ: a (B)·(B, C_out·D) product
                weight = c @ per_example_w
            else:  # Σᵢ cᵢ δᵢUᵢᵀ as one (C_out × B·P)·(B·P × D) product, c folded into δ
                weighted = (d * per_row(c, multiplicity)[:, None, None]).transpose(0, 1).reshape(c_out, -1)
                weight = weighted @ u.reshape(-1, u.shape[2])
            out.append(weight_layout(module, weight))
        if bias_per_example is not None:
            out.append(c @ bias_per_example)
        return out

    return sq, finish


# ------------------------------------------------------------------------------ K stacked models


def _shared(a: Tensor) -> Tensor | None:
    """The one tensor behind a stride-0 expansion over members (the model's input), else None."""
    return a[0] if a.stride(0) == 0 else None


def stacked_linear_norms_and_sum(layer: nn.Linear, names: tuple[str | None, str | None], a: Tensor, delta: Tensor):
    """‖gᵢ‖² = ‖δᵢ‖²(‖aᵢ‖² + 1) per member, and the clipped sums (c⊙δ)ᵀa, Σᵢ cᵢδᵢ."""
    weight, bias = names
    shared = _shared(a)
    delta_sq = row_sq_norms(delta.flatten(0, 1)).view(delta.shape[:2])
    a_sq = row_sq_norms(shared)[None] if shared is not None else row_sq_norms(a.flatten(0, 1)).view(a.shape[:2])
    sq = delta_sq * a_sq if weight else torch.zeros_like(delta_sq)
    if bias:
        sq = sq + delta_sq

    def finish(c: Tensor) -> dict[str, Tensor]:
        weighted = delta * c[:, :, None]  # (K, B, out)
        out = {}
        if weight:
            out[weight] = weighted.transpose(1, 2) @ (shared if shared is not None else a)  # (K, out, in)
        if bias:
            out[bias] = weighted.sum(dim=1)
        return out

    return sq, finish


def stacked_conv_norms_and_sum(layer: nn.Conv2d, names: tuple[str | None, str | None], a: Tensor, delta: Tensor):
    """Per-example norms of a conv layer for every member (`conv_norm_method` picks ghost or materialized,
    as for one run), and the clipped sums with the clip factors folded in."""
    weight, bias = names
    members, batch, c_out = delta.shape[:3]
    d = delta.reshape(members, batch, c_out, -1)  # δ: (K, B, C_out, P)
    positions = d.shape[3]
    shared = _shared(a)
    sq = torch.zeros(members, batch, dtype=delta.dtype, device=delta.device)
    if weight:
        u = conv_patches(layer, shared) if shared is not None else conv_patches(layer, a.flatten(0, 1))
        u = u if shared is not None else u.view(members, batch, positions, -1)  # (B | K·B, P, D)
        method = conv_norm_method(layer, positions)
        if method == "materialize":
            per_example = (d @ u).flatten(2)  # Gᵢ = δᵢUᵢᵀ: (K, B, C_out·D)
            sq = sq + row_sq_norms(per_example.flatten(0, 1)).view(members, batch)
        else:  # ‖Gᵢ‖² = ⟨UᵢᵀUᵢ, δᵢᵀδᵢ⟩
            gram_u = u @ u.transpose(-1, -2)  # (B | K, B, P, P)
            gram_d = d.transpose(2, 3) @ d  # (K, B, P, P)
            sq = sq + (gram_u * gram_d).sum(dim=(-1, -2))
    bias_per_example = d.sum(dim=3) if bias else None  # (K, B, C_out)
    if bias_per_example is not None:
        sq = sq + row_sq_norms(bias_per_example.flatten(0, 1)).view(members, batch)

    def finish(c: Tensor) -> dict[str, Tensor]:
        out = {}
        if weight:
            if method == "materialize":
                grad = (c[:, None, :] @ per_example).squeeze(1)  # Σᵢ cᵢGᵢ: (K, C_out·D)
            else:  # Σᵢ cᵢ δᵢUᵢᵀ: one (C_out × B·P)·(B·P × D) product per member
                weighted = (d * c[:, :, None, None]).transpose(1, 2).reshape(members, c_out, batch * positions)
                patches = u.reshape(*(() if shared is not None else (members,)), batch * positions, -1)
                grad = weighted @ patches
            out[weight] = weight_layout(layer, grad, members)
        if bias_per_example is not None:
            out[bias] = (c[:, None, :] @ bias_per_example).squeeze(1)
        return out

    return sq, finish


# ------------------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class LayerRule:
    """One kind of layer the book-keeping clippers support, with its rule for one model and for a stack."""

    layer: type[nn.Module]
    supports: Callable[[nn.Module], bool]  # e.g. the stock forward only (a subclass may compute something else)
    single: Callable  # (module, a, δ, *, workspace, conv_norms, multiplicity) → (‖gᵢ‖² (B,), finish(c) → [grads])
    # (module, (weight name, bias name), a, δ) → (‖gᵢ‖² (K, B), finish(c) → {name: grad}); None: no stacked rule,
    # and the stacked clipper refuses the model
    stacked: Callable | None
    input_dims: tuple[int, ...]  # the dimensions of a batched input the rule handles (e.g. (2,) for nn.Linear)


RULES: list[LayerRule] = []


def register(rule: LayerRule) -> LayerRule:
    RULES.append(rule)
    return rule


register(
    LayerRule(
        layer=nn.Linear,
        supports=lambda m: type(m).forward is nn.Linear.forward,
        single=linear_norms_and_sum,
        stacked=stacked_linear_norms_and_sum,
        input_dims=(2,),
    )
)
register(
    LayerRule(
        layer=nn.Conv2d,
        supports=lambda m: type(m).forward is nn.Conv2d.forward and m.groups == 1,
        single=conv_norms_and_sum,
        stacked=stacked_conv_norms_and_sum,
        input_dims=(4,),
    )
)


def rule_for(module: nn.Module) -> LayerRule | None:
    """The registered rule of a layer, or None when no rule computes its per-example norms."""
    return next((r for r in RULES if isinstance(module, r.layer) and r.supports(module)), None)

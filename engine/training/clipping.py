"""Per-example gradient clipping: the clipped *sum* Σᵢ clip(gᵢ) over a lot.

Flat clipping (one threshold C) scales each per-example gradient by cᵢ = min(1, C/‖gᵢ‖₂). Per-layer
clipping (thresholds C₁…C_K, one per parametrized layer) scales layer k's part of gᵢ (weight and
bias together) by min(1, C_k/‖gᵢₖ‖); a whole per-example gradient then has norm ≤ √(Σₖ C_k²), which
is the sensitivity to calibrate the noise to (`per_layer_thresholds` splits C so that it is C).

`BookKeepingClipper` (ghost norm + book-keeping; Li et al. 2022, Bu et al. 2023) never builds the
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

Layers without parameters (activations, pooling, flatten, GroupNorm/LayerNorm without affine
parameters) need nothing. A trainable parameter outside a supported layer raises
`UnsupportedModelError` and `make_clipper` falls back to `MaterializedClipper`, the generic path:
per-example gradients from `torch.func` (`vmap(grad(...))`) at the cost of B copies of the gradient.

BatchNorm is refused by both (`BatchNormError`, which `make_clipper` does not fall back from): it
normalizes each example with statistics of the whole batch, so an example's output, loss and
gradient depend on the other examples and clipping per example no longer bounds one example's
influence.
"""

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap
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
def _safe_thresholds(clip_norms: tuple[float, ...], dtype: torch.dtype) -> tuple[float, ...]:
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
    so C is shrunk by a few ulps first (`_safe_thresholds`): a factor is smaller than the exact
    min(1, C/n) by at most 5 units in the last place, and two cheap kernels compute it. With one
    threshold per column (`clip_norm` a sequence, `norms` of shape (B, K)) each column is clipped
    to its own threshold (per-layer clipping)."""
    if isinstance(clip_norm, float | int):
        return (_safe_thresholds((float(clip_norm),), norms.dtype)[0] / norms).clamp_(max=1.0)
    safe = constant_tensor(_safe_thresholds(tuple(clip_norm), norms.dtype), norms.dtype, norms.device)
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


def _check_clip_norm(clip_norm: ClipNorm, layer_names: list[str]) -> float | tuple[float, ...]:
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


def reject_batchnorm(model: nn.Module) -> None:
    for name, module in model.named_modules():
        if isinstance(module, _BatchNorm) or "BatchNorm" in type(module).__name__:
            where = f"layer {name!r}" if name else "the model"
            raise BatchNormError(
                f"{where} is a {type(module).__name__}: BatchNorm mixes examples (it normalizes each one with "
                "statistics of the whole batch), which breaks per-example clipping and so the privacy guarantee; "
                "use GroupNorm or LayerNorm, or no normalization"
            )


def _combine(layer_sq_norms: list[Tensor], clip_norm: float | tuple[float, ...]) -> tuple[Tensor, list[Tensor], Tensor]:
    """(total norms, clip factors per layer, clipped flags) from per-layer squared norms, each (B,)."""
    if isinstance(clip_norm, float):
        total = layer_sq_norms[0]
        for sq in layer_sq_norms[1:]:
            total = total + sq
        norms = total.sqrt()
        return norms, [clip_factors(norms, clip_norm)] * len(layer_sq_norms), norms > clip_norm
    layer_norms = torch.stack(layer_sq_norms, dim=1).sqrt()  # (B, K)
    factors = clip_factors(layer_norms, clip_norm)
    clipped = (layer_norms > torch.tensor(clip_norm, dtype=layer_norms.dtype, device=layer_norms.device)).any(dim=1)
    return torch.linalg.vector_norm(layer_norms, dim=1), list(factors.T), clipped


def _zero_sum(params: list[Tensor], x: Tensor, loss_sum: Tensor | None = None) -> ClippedSum:
    """An empty lot, or a model with nothing to train: zero gradients, zero norms, nothing clipped."""
    dtype = params[0].dtype if params else x.dtype
    return ClippedSum(
        grads=[torch.zeros_like(p) for p in params],
        norms=torch.zeros(len(x), device=x.device, dtype=dtype),
        loss_sum=torch.zeros((), device=x.device, dtype=dtype) if loss_sum is None else loss_sum,
        clipped=torch.zeros(len(x), device=x.device, dtype=torch.bool),
    )


def count_correct(logits: Tensor, y: Tensor) -> Tensor:
    """How many rows of `logits` rank the true class first: a by-product of the step's forward pass."""
    return (logits.detach().argmax(dim=1) == y).sum()


# ------------------------------------------------------------------------------ book-keeping


def _supported(module: nn.Module) -> bool:
    """nn.Linear or groups-1 nn.Conv2d whose forward is the stock one (a subclass may compute something else)."""
    if isinstance(module, nn.Linear):
        return type(module).forward is nn.Linear.forward
    if isinstance(module, nn.Conv2d):
        return type(module).forward is nn.Conv2d.forward and module.groups == 1
    return False


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
    (C_out, C_in, kh, kw) with `_to_weight_layout`. `workspace(shape)`, if given, supplies the
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


def _to_weight_layout(module: nn.Conv2d, grad: Tensor) -> Tensor:
    """A weight gradient with columns in `conv_patches` order (C_out, kh·kw·C_in) → (C_out, C_in, kh, kw)."""
    c_out, c_in, kh, kw = module.weight.shape
    return grad.view(c_out, kh, kw, c_in).permute(0, 3, 1, 2).contiguous()


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


class BookKeepingClipper:
    """Clipped sums for models whose trainable parameters all sit in nn.Linear / nn.Conv2d layers.

    `conv_norms` chooses how conv layers get their per-example norms: "auto" (the cheaper, see
    `conv_norm_method`), or "ghost" / "materialize" to force one (tests, benchmarks)."""

    def __init__(self, model: nn.Module, *, conv_norms: ConvNormMethod = "auto", keep_workspace: bool = False):
        reject_batchnorm(model)
        self.keep_workspace = keep_workspace
        if conv_norms not in ("auto", "ghost", "materialize"):
            raise ValueError(f"conv_norms must be 'auto', 'ghost' or 'materialize', got {conv_norms!r}")
        self.model = model
        self.conv_norms = conv_norms
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.layers: list[nn.Module] = []
        self.layer_names: list[str] = []
        owner: dict[int, str] = {}
        for name, module in model.named_modules():
            trainable = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if not trainable or not _supported(module):
                continue
            for p in trainable:
                if id(p) in owner:
                    raise UnsupportedModelError(f"a parameter is shared by layers {owner[id(p)]!r} and {name!r}")
                owner[id(p)] = name
            self.layers.append(module)
            self.layer_names.append(name)
        for name, p in model.named_parameters():
            if p.requires_grad and id(p) not in owner:
                raise UnsupportedModelError(f"parameter {name} is not in an nn.Linear or nn.Conv2d (groups=1) layer")
        self._index = {id(m): k for k, m in enumerate(self.layers)}
        self._slots = [p for m in self.layers for p in (m.weight, m.bias) if p is not None and p.requires_grad]
        # grads come out in layer order; `params` is in model order: the permutation between them
        position = {id(p): i for i, p in enumerate(self._slots)}
        self._order = [position[id(p)] for p in self.params]
        # one trainable layer that produces the model's output: its δ needs no autograd graph
        children = list(model.children()) if type(model) is nn.Sequential else []
        self._output_layer_only = len(self.layers) == 1 and bool(children) and children[-1] is self.layers[0]
        self._workspace: dict[tuple[int, str], Tensor] = {}

    def _buffer(self, layer: int, role: str, like: Tensor) -> Callable[[tuple[int, ...]], Tensor]:
        """Scratch space for a conv layer's big temporaries (patches, per-example gradients), kept between
        calls when `keep_workspace` (a fresh tensor above glibc's mmap threshold is page-faulted in on every
        step, which doubled the cost of unfolding a 1024-example MNIST lot), else freed at the end of each
        call so that peak memory stays near a non-private step's (about 78 MB less for the MNIST CNN at
        B = 1024). Grows with 25% headroom, as Poisson lot
        sizes vary; never handed out of `clipped_sum`."""

        def get(shape: tuple[int, ...]) -> Tensor:
            n = math.prod(shape)
            buf = self._workspace.get((layer, role))
            if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
                buf = torch.empty(n + n // 4, dtype=like.dtype, device=like.device)
                self._workspace[(layer, role)] = buf
            return buf[:n].view(shape)

        return get

    def _forward(self, x: Tensor, *, graph: bool) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """The logits, and (input, output) of each layer in `self.layers` order."""
        captured: list[tuple[nn.Module, Tensor, Tensor]] = []

        def keep(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            captured.append((module, inputs[0], output))

        handles = [layer.register_forward_hook(keep) for layer in self.layers]
        try:
            with torch.set_grad_enabled(graph):
                logits = self.model(x)
        finally:
            for handle in handles:
                handle.remove()
        if len(captured) != len(self.layers):
            raise UnsupportedModelError(
                "every parametrized layer must run exactly once per forward pass; "
                f"{len(captured)} calls for {len(self.layers)} layers"
            )
        slots: list[tuple[Tensor, Tensor] | None] = [None] * len(self.layers)
        for module, a, z in captured:
            k = self._index[id(module)]
            if slots[k] is not None:
                raise UnsupportedModelError(f"layer {self.layer_names[k]!r} runs more than once per forward pass")
            expected = 2 if isinstance(module, nn.Linear) else 4
            if a.dim() != expected:
                raise UnsupportedModelError(
                    f"layer {self.layer_names[k]!r} got a {a.dim()}-D input; only {expected}-D (batched) is supported"
                )
            slots[k] = (a.detach(), z)
        if logits.dim() != 2:
            raise UnsupportedModelError(
                f"the model must output (batch, classes) logits, got shape {tuple(logits.shape)}"
            )
        return logits, slots  # type: ignore[return-value]

    def _deltas(self, x: Tensor, y: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor], Tensor]:
        """(per-example losses, layer inputs a, layer output gradients δ = ∂Σℓ/∂z, the number of examples
        classified right), all detached.

        The cross-entropy gradient at the logits is written out, softmax − one-hot, and autograd
        runs from the logits to the other layers' outputs only: a model that is one linear layer
        (logistic regression) needs no autograd graph at all."""
        logits, captured = self._forward(x, graph=not self._output_layer_only)
        if self._output_layer_only and captured[-1][1] is not logits:  # a hook replaced the output
            logits, captured = self._forward(x, graph=True)
        with torch.no_grad():
            log_probs = F.log_softmax(logits, dim=1)
            losses = F.nll_loss(log_probs, y, reduction="none")
            d_logits = log_probs.exp()
            d_logits.scatter_add_(1, y.unsqueeze(1), d_logits.new_full((1, 1), -1.0).expand(len(y), 1))
        last_is_logits = captured[-1][1] is logits
        inner = [z for _, z in captured[:-1]] if last_is_logits else [z for _, z in captured]
        deltas = list(torch.autograd.grad(logits, inner, d_logits, allow_unused=True)) if inner else []
        deltas = [torch.zeros_like(z) if d is None else d for d, z in zip(deltas, inner, strict=True)]
        if last_is_logits:
            deltas.append(d_logits)
        return losses, [a for a, _ in captured], deltas, count_correct(logits, y)

    def clipped_sum(self, x: Tensor, y: Tensor, clip_norm: ClipNorm) -> ClippedSum:
        thresholds = _check_clip_norm(clip_norm, self.layer_names)
        if len(x) == 0:
            return _zero_sum(self.params, x)
        if not self.layers:
            with torch.no_grad():
                return _zero_sum(self.params, x, F.cross_entropy(self.model(x), y, reduction="sum"))
        losses, inputs, deltas, correct = self._deltas(x, y)
        sq_norms: list[Tensor] = []
        finishers = []
        for k, (module, a, delta) in enumerate(zip(self.layers, inputs, deltas, strict=True)):
            if isinstance(module, nn.Linear):
                sq, finish = self._linear(module, a, delta)
            else:
                sq, finish = self._conv(k, module, a, delta)
            sq_norms.append(sq)
            finishers.append(finish)
        norms, factors, clipped = _combine(sq_norms, thresholds)
        in_layer_order = [g for finish, c in zip(finishers, factors, strict=True) for g in finish(c)]
        grads = [in_layer_order[i] for i in self._order]
        if not self.keep_workspace:  # memory over speed: nothing but the result outlives the call
            self._workspace.clear()
        return ClippedSum(grads=grads, norms=norms, loss_sum=losses.sum(), clipped=clipped, correct=correct)

    @staticmethod
    def _linear(module: nn.Linear, a: Tensor, delta: Tensor):
        """‖gᵢ‖², and a function of the clip factors c giving [Σᵢ cᵢ gᵢ] for (weight, bias) as trained."""
        train_w, train_b = module.weight.requires_grad, module.bias is not None and module.bias.requires_grad
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

    def _conv(self, k: int, module: nn.Conv2d, a: Tensor, delta: Tensor):
        train_w, train_b = module.weight.requires_grad, module.bias is not None and module.bias.requires_grad
        batch, c_out = delta.shape[:2]
        d = delta.reshape(batch, c_out, -1)  # δᵢ: (B, C_out, P)
        sq = None
        if train_w:
            u = conv_patches(module, a, self._buffer(k, "patches", a))  # Uᵢᵀ: (B, P, D)
            if u.shape[1] != d.shape[2]:
                raise UnsupportedModelError(f"conv layer output has {d.shape[2]} positions, its patches {u.shape[1]}")
            method = self.conv_norms if self.conv_norms != "auto" else conv_norm_method(module, d.shape[2])
            if method == "materialize":
                g = self._buffer(k, "grads", a)((batch, c_out, u.shape[2]))
                per_example_w = torch.bmm(d, u, out=g).view(batch, -1)  # Gᵢ = δᵢUᵢᵀ, flattened: (B, C_out·D)
                sq = row_sq_norms(per_example_w)
            else:  # ‖Gᵢ‖² = ⟨UᵢᵀUᵢ, δᵢᵀδᵢ⟩ over P × P
                gram_u = torch.bmm(u, u.transpose(1, 2))
                gram_d = torch.bmm(d.transpose(1, 2), d)
                sq = torch.linalg.vecdot(gram_u.view(batch, -1), gram_d.view(batch, -1))
        bias_per_example = d.sum(dim=2) if train_b else None  # (B, C_out)
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
                    weighted = (d * c[:, None, None]).transpose(0, 1).reshape(c_out, -1)
                    weight = weighted @ u.reshape(-1, u.shape[2])
                out.append(_to_weight_layout(module, weight))
            if bias_per_example is not None:
                out.append(c @ bias_per_example)
            return out

        return sq, finish


# ------------------------------------------------------------------------------ materialized


class MaterializedClipper:
    """Any model without BatchNorm: per-example gradients via torch.func, then clip and sum."""

    def __init__(self, model: nn.Module):
        reject_batchnorm(model)
        self.model = model
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad]
        # a layer is a module that owns trainable parameters directly: "1.weight" belongs to layer "1"
        owners = [n.rpartition(".")[0] for n in self.names]
        self.layer_names = list(dict.fromkeys(owners))
        self._layer_of = [self.layer_names.index(o) for o in owners]

    def clipped_sum(self, x: Tensor, y: Tensor, clip_norm: ClipNorm) -> ClippedSum:
        thresholds = _check_clip_norm(clip_norm, self.layer_names)
        if len(x) == 0:
            return _zero_sum(self.params, x)
        if not self.params:
            with torch.no_grad():
                return _zero_sum(self.params, x, F.cross_entropy(self.model(x), y, reduction="sum"))
        params = {n: p.detach() for n, p in zip(self.names, self.params, strict=True)}
        buffers = dict(self.model.named_buffers())

        def example_loss(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
            out = functional_call(self.model, (p, buffers), (xi.unsqueeze(0),))
            return F.cross_entropy(out, yi.unsqueeze(0)), out.squeeze(0)  # the logits ride along as aux

        per_example, (losses, logits) = vmap(grad_and_value(example_loss, has_aux=True), in_dims=(None, 0, 0))(
            params, x, y
        )
        flat = [per_example[n].reshape(x.shape[0], -1) for n in self.names]
        layer_sq: list[Tensor] = [torch.zeros(x.shape[0], dtype=flat[0].dtype, device=x.device)] * len(self.layer_names)
        for k, f in zip(self._layer_of, flat, strict=True):
            layer_sq[k] = layer_sq[k] + row_sq_norms(f)
        norms, factors, clipped = _combine(layer_sq, thresholds)
        grads = [
            torch.einsum("b,b...->...", factors[k], per_example[n])
            for n, k in zip(self.names, self._layer_of, strict=True)
        ]
        return ClippedSum(grads=grads, norms=norms, loss_sum=losses.sum().detach(), clipped=clipped,
                          correct=count_correct(logits, y))  # fmt: skip


def make_clipper(model: nn.Module) -> BookKeepingClipper | MaterializedClipper:
    """The fastest exact clipper for this model; BatchNorm raises `BatchNormError` (no fallback)."""
    try:
        return BookKeepingClipper(model)
    except BatchNormError:
        raise
    except UnsupportedModelError:
        return MaterializedClipper(model)

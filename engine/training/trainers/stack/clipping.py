"""The stacked book-keeping clipper: per-example norms and clipped sums of K stacked models (one
architecture) on one shared batch, each member at its own threshold, never a per-example gradient.
The per-layer rules for a stack are registered beside the single-model ones (`engine.training.clipping.rules`);
the single-model clipper, with the derivations, is `engine.training.clipping.BookKeepingClipper`."""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from engine.training.clipping import (
    BookKeepingClipper,
    UnsupportedModelError,
    clip_factors,
    constant_tensor,
    count_correct,
)
from engine.training.clipping.rules import rule_for
from engine.training.clipping.sums import refuse_forward_hooks


class StackError(ValueError):
    """Runs that cannot train as one stack (different data, model or lots, or not DP-SGD)."""


@dataclass(frozen=True)
class StackedClippedSum:
    grads: dict[str, Tensor]  # name → (K, *shape): Σᵢ clip(gᵢ) of each member
    norms: Tensor  # (K, B) per-example gradient norms before clipping (private diagnostics)
    loss_sum: Tensor  # (K,)
    clipped: Tensor  # (K, B) bool
    correct: Tensor  # (K,) examples each member classified right


class StackedClipper:
    """Book-keeping clipped sums of K stacked models (same architecture) on one shared batch."""

    def __init__(self, models: Sequence[nn.Module]):
        self.base = models[0]
        try:
            layout = BookKeepingClipper(self.base)  # validates: trainable parameters only in Linear / Conv2d
        except UnsupportedModelError as exc:
            raise StackError(f"this model cannot be stacked: {exc}") from None
        unstackable = [
            f"{name!r} ({type(layer).__name__})"
            for name, layer in zip(layout.layer_names, layout.layers, strict=True)
            if rule_for(layer).stacked is None
        ]
        if unstackable:
            raise StackError(f"this model cannot be stacked: layer(s) {', '.join(unstackable)} have no stacked rule")
        self.layers = layout.layers
        self.layer_names = layout.layer_names
        params, buffers = stack_module_state(list(models))
        self.params = {name: p.detach() for name, p in params.items()}
        self.buffers = buffers
        self.names = [n for n, p in self.base.named_parameters() if p.requires_grad]
        self._layer_params: list[tuple[str | None, str | None]] = []
        module_names = {id(m): n for n, m in self.base.named_modules()}
        for layer in self.layers:
            prefix = module_names[id(layer)]
            weight = f"{prefix}.weight" if layer.weight.requires_grad else None
            bias = f"{prefix}.bias" if layer.bias is not None and layer.bias.requires_grad else None
            self._layer_params.append((weight, bias))
        self._output_shapes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        # the last trainable layer's output is the logits (a Sequential ending in it): its δ is written out
        children = list(self.base.children()) if type(self.base) is nn.Sequential else []
        self._last_is_output = bool(children) and children[-1] is self.layers[-1]

    @property
    def members(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def keep(self, alive: Tensor) -> None:
        """Drop the members not in `alive` (indices into the current stack)."""
        self.params = {n: p[alive].contiguous() for n, p in self.params.items()}
        self.buffers = {n: b[alive].contiguous() for n, b in self.buffers.items()}

    def logits(self, x: Tensor, *, per_member: bool = False) -> Tensor:
        """(K, B, classes): every member's logits on a batch, shared (B, ...) or one per member (K, B, ...)."""
        with torch.no_grad():
            return vmap(
                lambda p, b, xk: functional_call(self.base, (p, b), (xk,), tie_weights=False),
                in_dims=(0, 0, member_axis(per_member)),
            )(self.params, self.buffers, x)

    def _layer_output_shapes(self, x: Tensor, per_member: bool) -> list[tuple[int, ...]]:
        """Each layer's output shape past the batch axis (found once by a one-example pass)."""
        one = x[0, :1] if per_member else x[:1]
        key = tuple(one.shape[1:])
        if key not in self._output_shapes:
            shapes: list[tuple[int, ...]] = []
            handles = [
                layer.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape[1:]))) for layer in self.layers
            ]
            try:
                with torch.no_grad():
                    self.base(one)
            finally:
                for handle in handles:
                    handle.remove()
            self._output_shapes[key] = shapes
        return self._output_shapes[key]

    def _deltas(
        self, x: Tensor, y: Tensor, per_member: bool, row_mask: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor], list[Tensor], Tensor]:
        """Per member: losses (K, B), each layer's input a (K, B, ...; a stride-0 expansion where all members
        share it) and output gradient δ = ∂Σℓ/∂z (K, B, ...), and the count classified right (K,) of the rows
        `row_mask` keeps (all without one).

        One `vmap` of `functional_call` runs the K forward passes; each probed layer adds a zero "probe" to its
        output, so ∂Σℓ/∂probe = δ. As in `BookKeepingClipper`, the cross-entropy gradient at the logits is
        written out (softmax − one-hot) and autograd runs from the logits to the probes only; the output
        layer needs no probe, and a model that is one linear layer needs no autograd at all."""
        refuse_forward_hooks(self.layers, self.layer_names)
        shapes = self._layer_output_shapes(x, per_member)
        probed = len(self.layers) - 1 if self._last_is_output else len(self.layers)
        probes = [x.new_zeros((self.members, len(y), *shapes[k])).requires_grad_() for k in range(probed)]
        index = {id(layer): k for k, layer in enumerate(self.layers)}

        def member_forward(params, buffers, probes, xk):
            inputs: list[Tensor | None] = [None] * len(self.layers)

            def probe(module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> Tensor | None:
                k = index[id(module)]
                inputs[k] = args[0]
                return output + probes[k] if k < len(probes) else None  # ∂Σℓ/∂probe = ∂Σℓ/∂z: the layer's δ

            handles = [layer.register_forward_hook(probe) for layer in self.layers]
            try:
                return functional_call(self.base, (params, buffers), (xk,), tie_weights=False), inputs
            finally:
                for handle in handles:
                    handle.remove()

        with torch.set_grad_enabled(bool(probes)):
            logits, inputs = vmap(member_forward, in_dims=(0, 0, 0, member_axis(per_member)))(
                self.params, self.buffers, probes, x
            )  # (K, B, classes)
        with torch.no_grad():
            log_probs = F.log_softmax(logits, dim=2)
            losses = -log_probs.gather(2, y.expand(self.members, -1).unsqueeze(2)).squeeze(2)
            d_logits = log_probs.exp()
            d_logits.scatter_add_(
                2,
                y.expand(self.members, -1).unsqueeze(2),
                d_logits.new_full((1, 1, 1), -1.0).expand(self.members, len(y), 1),
            )
            correct = count_correct(logits, y, row_mask)
        deltas = list(torch.autograd.grad(logits, probes, d_logits)) if probes else []
        if self._last_is_output:
            deltas.append(d_logits)
        return losses, [a.detach() for a in inputs], deltas, correct

    def clipped_sum(
        self,
        x: Tensor,
        y: Tensor,
        clip_norms: Sequence[float],
        *,
        per_member: bool = False,
        row_mask: Tensor | None = None,
    ) -> StackedClippedSum:
        """Σᵢ clip(gᵢ) for each member k at its own threshold `clip_norms[k]` (flat clipping), on a batch
        shared by all members (B, ...) or one per member (K, B, ...), with labels y (B,). With `row_mask` (B,)
        (1 for a row of the lot, 0 for padding: `stacked.step_graph`), every member's clip factors are multiplied
        by it, so padding adds exactly nothing, and the losses and counts cover the kept rows only."""
        members = self.members
        if len(y) == 0:
            zeros = y.new_zeros((members, 0), dtype=x.dtype)
            return StackedClippedSum(
                grads={n: torch.zeros_like(self.params[n]) for n in self.names},
                norms=zeros,
                loss_sum=x.new_zeros(members),
                clipped=zeros.bool(),
                correct=torch.zeros(members, dtype=torch.long, device=x.device),
            )
        losses, inputs, deltas, correct = self._deltas(x, y, per_member, row_mask)
        sq_norms, finishers = [], []
        for layer, names, a, delta in zip(self.layers, self._layer_params, inputs, deltas, strict=True):
            sq, finish = rule_for(layer).stacked(layer, names, a, delta)
            sq_norms.append(sq)
            finishers.append(finish)
        norms = torch.stack(sq_norms).sum(dim=0).sqrt()  # (K, B)
        factors = clip_factors(norms.T, tuple(float(c) for c in clip_norms)).T  # each member at its own C
        if row_mask is not None:
            factors, losses = factors * row_mask, losses * row_mask
        thresholds = constant_tensor(tuple(clip_norms), norms.dtype, norms.device)
        grads: dict[str, Tensor] = {}
        for finish in finishers:
            grads.update(finish(factors))
        return StackedClippedSum(
            grads={n: grads[n] for n in self.names},
            norms=norms,
            loss_sum=losses.sum(dim=1),
            clipped=norms > thresholds[:, None],
            correct=correct,
        )


def clipped_sum_in_chunks(
    clipper: StackedClipper, x: Tensor, y: Tensor, clip_norms: list[float], chunk: int | None, *, per_member: bool
) -> StackedClippedSum:
    """`clipper.clipped_sum` over the rows of a lot, `chunk` rows at a time (the members' physical batch size)."""
    if chunk is None or len(y) <= chunk:
        return clipper.clipped_sum(x, y, clip_norms, per_member=per_member)
    parts = [
        clipper.clipped_sum(
            x[:, s : s + chunk] if per_member else x[s : s + chunk], y[s : s + chunk], clip_norms, per_member=per_member
        )
        for s in range(0, len(y), chunk)
    ]
    grads = parts[0].grads
    for part in parts[1:]:
        for name, g in part.grads.items():
            grads[name].add_(g)
    return StackedClippedSum(
        grads=grads,
        norms=torch.cat([p.norms for p in parts], dim=1),
        loss_sum=sum(p.loss_sum for p in parts),
        clipped=torch.cat([p.clipped for p in parts], dim=1),
        correct=sum(p.correct for p in parts),
    )


def member_axis(per_member: bool) -> int | None:
    """vmap's axis of the inputs: 0 when they hold one batch per member (K, B, ...: inputs that differ by
    member, as DP-PCA features of different seeds), None when every member sees the same batch (B, ...)."""
    return 0 if per_member else None

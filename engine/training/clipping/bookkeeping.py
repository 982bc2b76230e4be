"""The book-keeping clipper (ghost norm + book-keeping; Li et al. 2022, Bu et al. 2023): clipped sums for
models whose trainable parameters all sit in layers with a registered rule (`rules`: nn.Linear, groups-1
nn.Conv2d; `normalization_rules`: affine nn.GroupNorm, WeightStandardizedConv2d), from one forward pass and one
backward pass to the layer outputs; see the package docstring. Augmentation multiplicity (K copies per example,
each example's gradient the mean of its copies'; De et al. 2022, §3.1) is `clipped_sum(..., multiplicity=K)`."""

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.training.clipping.rules import rule_for
from engine.training.clipping.sums import (
    ClipNorm,
    ClippedSum,
    ConvNormMethod,
    UnsupportedModelError,
    check_clip_norm,
    check_multiplicity,
    combine_layer_norms,
    count_correct,
    refuse_forward_hooks,
    reject_batchnorm,
    zero_sum,
)


class BookKeepingClipper:
    """Clipped sums for models whose trainable parameters all sit in layers with a rule (nn.Linear, nn.Conv2d,
    affine nn.GroupNorm, WeightStandardizedConv2d); each such layer must run exactly once per forward pass.

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
            if not trainable or rule_for(module) is None:
                continue
            for p in trainable:
                if id(p) in owner:
                    raise UnsupportedModelError(f"a parameter is shared by layers {owner[id(p)]!r} and {name!r}")
                owner[id(p)] = name
            self.layers.append(module)
            self.layer_names.append(name)
        for name, p in model.named_parameters():
            if p.requires_grad and id(p) not in owner:
                raise UnsupportedModelError(
                    f"parameter {name} is not in an nn.Linear, nn.Conv2d (groups=1), affine nn.GroupNorm or "
                    "WeightStandardizedConv2d layer"
                )
        refuse_forward_hooks(self.layers, self.layer_names)  # here so that `make_clipper` falls back; again per call
        self._index = {id(m): k for k, m in enumerate(self.layers)}
        self._rules = [rule_for(m) for m in self.layers]
        self._slots = [p for m in self.layers for p in (m.weight, m.bias) if p is not None and p.requires_grad]
        # grads come out in layer order; `params` is in model order: the permutation between them
        position = {id(p): i for i, p in enumerate(self._slots)}
        self._order = [position[id(p)] for p in self.params]
        # one trainable layer that produces the model's output: its δ needs no autograd graph
        children = list(model.children()) if type(model) is nn.Sequential else []
        self._output_layer_only = len(self.layers) == 1 and bool(children) and children[-1] is self.layers[0]
        # the whole model is one nn.Linear (logistic regression): its logits need no module call (`linear_logits`)
        self.single_linear = len(self.layers) == 1 and children == self.layers and isinstance(self.layers[0], nn.Linear)
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
            expected = self._rules[k].input_dims
            if a.dim() not in expected:
                allowed = " or ".join(f"{n}-D" for n in expected)
                raise UnsupportedModelError(
                    f"layer {self.layer_names[k]!r} got a {a.dim()}-D input; only {allowed} (batched) is supported"
                )
            slots[k] = (a.detach(), z)
        if logits.dim() != 2:
            raise UnsupportedModelError(
                f"the model must output (batch, classes) logits, got shape {tuple(logits.shape)}"
            )
        return logits, slots  # type: ignore[return-value]

    def deltas(
        self, x: Tensor, y: Tensor, row_mask: Tensor | None = None, *, multiplicity: int = 1
    ) -> tuple[Tensor, list[Tensor], list[Tensor], Tensor]:
        """(per-row losses, layer inputs a, layer output gradients δ = ∂Σℓ/∂z, the number of rows classified
        right, counting only the rows `row_mask` keeps), all detached.

        The cross-entropy gradient at the logits is written out, softmax − one-hot, and autograd
        runs from the logits to the other layers' outputs only: a model that is one linear layer
        (logistic regression) needs no autograd graph at all. With `multiplicity` K > 1 it is scaled by 1/K
        (so is every δ), making each example's gradient the mean of its K copies'."""
        refuse_forward_hooks(self.layers, self.layer_names)
        if self.single_linear and x.dim() == 2:
            logits = linear_logits(self.layers[0], x)
            captured = [(x.detach(), logits)]
        else:
            logits, captured = self._forward(x, graph=not self._output_layer_only)
            if self._output_layer_only and captured[-1][1] is not logits:  # a hook replaced the output
                logits, captured = self._forward(x, graph=True)
        with torch.no_grad():
            log_probs = F.log_softmax(logits, dim=1)
            losses = F.nll_loss(log_probs, y, reduction="none")
            d_logits = log_probs.exp()
            d_logits.scatter_add_(1, y.unsqueeze(1), d_logits.new_full((1, 1), -1.0).expand(len(y), 1))
            if multiplicity > 1:
                d_logits.mul_(1.0 / multiplicity)
        last_is_logits = captured[-1][1] is logits
        inner = [z for _, z in captured[:-1]] if last_is_logits else [z for _, z in captured]
        deltas = list(torch.autograd.grad(logits, inner, d_logits, allow_unused=True)) if inner else []
        deltas = [torch.zeros_like(z) if d is None else d for d, z in zip(deltas, inner, strict=True)]
        if last_is_logits:
            deltas.append(d_logits)
        return losses, [a for a, _ in captured], deltas, count_correct(logits, y, row_mask)

    def clipped_sum(
        self,
        x: Tensor,
        y: Tensor,
        clip_norm: ClipNorm,
        *,
        row_mask: Tensor | None = None,
        multiplicity: int = 1,
    ) -> ClippedSum:
        """Σᵢ clip(gᵢ) over the rows of x. With `row_mask` (1 for a row of the lot, 0 for padding: a fixed-shape
        lot, `step_graph`), each clip factor is multiplied by its row's mask, so a padding row adds exactly
        nothing, and the loss sum and the count of right answers cover the kept rows only; the norms and
        clipped flags still have a row per row of x.

        With `multiplicity` K > 1 (augmentation multiplicity, De et al. 2022 §3.1), x holds B·K rows, example-major
        (rows iK … iK+K−1 are example i's copies), gᵢ = (1/K)Σₖ ∇ℓᵢₖ is clipped as one example (`rules`), the
        norms and clipped flags have B rows, the loss sum is Σᵢ (mean of example i's copies' losses), and
        `correct` counts right rows divided by K (a float: the mean over copies of the examples right). It
        costs about a step on B·K rows. Not with `row_mask`."""
        thresholds = check_clip_norm(clip_norm, self.layer_names)
        copies = check_multiplicity(multiplicity, len(x))
        if copies > 1 and row_mask is not None:
            raise ValueError("a row mask (padded lot) and augmentation multiplicity do not combine")
        if len(x) == 0:
            return zero_sum(self.params, x)
        if not self.layers:
            with torch.no_grad():
                loss_sum = F.cross_entropy(self.model(x), y, reduction="sum")
                return zero_sum(self.params, x[::copies], loss_sum if copies == 1 else loss_sum / copies)
        losses, inputs, deltas, correct = self.deltas(x, y, row_mask, multiplicity=copies)
        sq_norms, finishers = self.layer_norms(inputs, deltas, multiplicity=copies)
        norms, factors, clipped = combine_layer_norms(sq_norms, thresholds)
        if row_mask is not None:
            factors = [c * row_mask for c in factors]
            losses = losses * row_mask
        if copies > 1:
            losses, correct = losses.view(-1, copies).mean(dim=1), correct / copies
        grads = self.in_model_order([g for finish, c in zip(finishers, factors, strict=True) for g in finish(c)])
        self.release_workspace()
        return ClippedSum(grads=grads, norms=norms, loss_sum=losses.sum(), clipped=clipped, correct=correct)

    def layer_norms(
        self, inputs: list[Tensor], deltas: list[Tensor], *, multiplicity: int = 1
    ) -> tuple[list[Tensor], list[Callable]]:
        """Each layer's per-example squared gradient norms (B,) and its finish(c) → clipped sums, by the layer's
        registered rule (`rules`), from the layer inputs and output gradients of `deltas` (B·K rows with
        `multiplicity` K copies per example)."""
        sq_norms, finishers = [], []
        for k, (module, a, delta) in enumerate(zip(self.layers, inputs, deltas, strict=True)):
            workspace = functools.partial(self._buffer, k, like=a)
            sq, finish = self._rules[k].single(
                module, a, delta, workspace=workspace, conv_norms=self.conv_norms, multiplicity=multiplicity
            )
            sq_norms.append(sq)
            finishers.append(finish)
        return sq_norms, finishers

    def in_model_order(self, in_layer_order: list[Tensor]) -> list[Tensor]:
        """Gradients computed layer by layer (weight, bias), reordered as `params`."""
        return [in_layer_order[i] for i in self._order]

    def release_workspace(self) -> None:
        """Memory over speed, unless `keep_workspace`: nothing but the result outlives a call."""
        if not self.keep_workspace:
            self._workspace.clear()


def linear_logits(layer: nn.Linear, x: Tensor) -> Tensor:
    """xWᵀ + b of a (B, d) input, computed as (Wxᵀ)ᵀ + b without autograd: the same product in the orientation
    that BLAS runs fastest for a narrow output (a 784→10 layer at one thread on a 2-core EPYC: 93 µs against
    301 µs for `F.linear` at B 256, 366 against 736 µs at B 1,024). Rounding may differ from `F.linear`'s in the
    last bits (engine 0.5.0)."""
    with torch.no_grad():
        logits = torch.mm(layer.weight, x.t()).t().contiguous()
        return logits if layer.bias is None else logits.add_(layer.bias)

"""The materialized clipper: any model without BatchNorm, by per-example gradients from `torch.func`
(`vmap(grad(...))`) at the cost of B copies of the gradient; the fallback of `make_clipper`."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from engine.training.clipping.sums import (
    ClipNorm,
    ClippedSum,
    check_clip_norm,
    check_multiplicity,
    combine_layer_norms,
    count_correct,
    reject_batchnorm,
    row_sq_norms,
    zero_sum,
)


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
        self.layer_of = [self.layer_names.index(o) for o in owners]

    def clipped_sum(self, x: Tensor, y: Tensor, clip_norm: ClipNorm, *, multiplicity: int = 1) -> ClippedSum:
        """Σᵢ clip(gᵢ) over the rows of x; with `multiplicity` K > 1, over groups of K rows (example i's augmented
        copies, rows iK … iK+K−1), gᵢ being the mean of its copies' gradients (De et al. 2022, §3.1), as
        `BookKeepingClipper.clipped_sum` (norms and flags per example, loss the sum of the copies' means,
        `correct` right rows / K)."""
        thresholds = check_clip_norm(clip_norm, self.layer_names)
        copies = check_multiplicity(multiplicity, len(x))
        if len(x) == 0:
            return zero_sum(self.params, x)
        if not self.params:
            with torch.no_grad():
                loss_sum = F.cross_entropy(self.model(x), y, reduction="sum")
                return zero_sum(self.params, x[::copies], loss_sum if copies == 1 else loss_sum / copies)
        params = {n: p.detach() for n, p in zip(self.names, self.params, strict=True)}
        buffers = dict(self.model.named_buffers())

        def example_loss(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
            out = functional_call(self.model, (p, buffers), (xi.unsqueeze(0),))
            return F.cross_entropy(out, yi.unsqueeze(0)), out.squeeze(0)  # the logits ride along as aux

        per_example, (losses, logits) = vmap(grad_and_value(example_loss, has_aux=True), in_dims=(None, 0, 0))(
            params, x, y
        )
        correct = count_correct(logits, y)
        if copies > 1:  # each example's gradient: the mean of its copies'
            per_example = {n: g.view(-1, copies, *g.shape[1:]).mean(dim=1) for n, g in per_example.items()}
            losses, correct = losses.view(-1, copies).mean(dim=1), correct / copies
        batch = x.shape[0] // copies
        flat = [per_example[n].reshape(batch, -1) for n in self.names]
        layer_sq: list[Tensor] = [torch.zeros(batch, dtype=flat[0].dtype, device=x.device)] * len(self.layer_names)
        for k, f in zip(self.layer_of, flat, strict=True):
            layer_sq[k] = layer_sq[k] + row_sq_norms(f)
        norms, factors, clipped = combine_layer_norms(layer_sq, thresholds)
        grads = [
            torch.einsum("b,b...->...", factors[k], per_example[n])
            for n, k in zip(self.names, self.layer_of, strict=True)
        ]
        return ClippedSum(grads=grads, norms=norms, loss_sum=losses.sum().detach(), clipped=clipped, correct=correct)

"""A vectorized stack's clip → noise → 1/L stages captured in one CUDA graph, as `step_graph` does for one run:
the shared Poisson lot padded to a fixed capacity with a 0/1 row mask that multiplies every member's clip factors,
each member's noise drawn outside the graph from its own stream (its separate run's draws) and copied in, the
stack's one public 1/L. A lot over the capacity runs the eager stages; a member leaving the stack changes the
parameters' shapes, and the trainer makes a new graph for the members left (`stack_graph_for`)."""

from collections.abc import Sequence

import torch
from torch import Tensor

from engine.training.algorithms.dpsgd_graph import PaddedLot, Replayed, lot_capacity
from engine.training.trainers.stack.clipping import StackedClippedSum, StackedClipper


class StackStepGraph:
    """The stacked clipper's masked clipped sum on `capacity` static rows, plus each member's noise, times 1/L."""

    def __init__(
        self, clipper: StackedClipper, x: Tensor, y: Tensor, *, capacity: int, per_member: bool, inv_lot: float
    ):
        self.clipper = clipper
        self.per_member = per_member
        self.inv_lot = inv_lot
        # the rows' axis of the inputs: (K, N, d) when each member has its own, else (N, d)
        self.rows = PaddedLot(x, y, capacity=capacity, mask_dtype=x.dtype, axis=1 if per_member else 0)
        self.noise = {name: torch.zeros_like(clipper.params[name]) for name in clipper.names}
        self.replayed = Replayed(self.body, x.device)

    def fits(self, lot_size: int) -> bool:
        return self.rows.fits(lot_size)

    def body(self, clip_norms: tuple[float, ...]) -> StackedClippedSum:
        clipped = self.clipper.clipped_sum(
            self.rows.x, self.rows.y, clip_norms, per_member=self.per_member, row_mask=self.rows.mask
        )
        for name, g in clipped.grads.items():
            g.add_(self.noise[name]).mul_(self.inv_lot)
        return clipped

    def run(
        self, x: Tensor, y: Tensor, lot: Tensor, clip_norms: Sequence[float], noise: Sequence[Sequence[Tensor]]
    ) -> StackedClippedSum:
        """The members' updates (noisy clipped sums times 1/L) in `grads`, and the lot's diagnostics (its n rows),
        for a lot that `fits`; `noise[row]` is that member's noise, tensors in `clipper.names` order."""
        n = self.rows.load(x, y, lot)
        for row, member_noise in enumerate(noise):
            for name, drawn in zip(self.clipper.names, member_noise, strict=True):
                self.noise[name][row].copy_(drawn)
        out = self.replayed(tuple(float(c) for c in clip_norms))
        return StackedClippedSum(
            grads=out.grads,
            norms=out.norms[:, :n],
            loss_sum=out.loss_sum,
            clipped=out.clipped[:, :n],
            correct=out.correct,
        )


def stack_graph_for(
    clipper: StackedClipper,
    x: Tensor,
    y: Tensor,
    *,
    per_member: bool,
    n_train: int,
    sampling_rate: float,
    lot_size: int,
    physical_batch_size: int | None,
) -> StackStepGraph | None:
    """A `StackStepGraph` on a CUDA device whose lot capacity fits the members' physical batch size; else None."""
    if x.device.type != "cuda":
        return None
    capacity = lot_capacity(n_train, sampling_rate)
    if physical_batch_size is not None and capacity > physical_batch_size:
        return None
    return StackStepGraph(clipper, x, y, capacity=capacity, per_member=per_member, inv_lot=1.0 / lot_size)

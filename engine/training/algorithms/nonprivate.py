"""The non-private baseline: the same model, optimizer and schedule as a private run, on shuffled
batches of size L with the mean loss, so a plot can draw the price of privacy. No clipping, no
noise, no ledger; its ε is infinite."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.training.algorithms.registry import Step, StepContext, StepStats, register_step
from engine.training.config.keys import Algorithm


class ShuffledBatches:
    """Epoch after epoch, a fresh permutation of the training set cut into batches of `batch_size`."""

    def __init__(self, n: int, batch_size: int, generator: torch.Generator, device: torch.device):
        self.n, self.batch_size, self.generator, self.device = n, batch_size, generator, device
        self.order = torch.empty(0, dtype=torch.long, device=device)
        self.position = 0

    def next(self) -> Tensor:
        if self.position >= len(self.order):
            self.order = torch.randperm(self.n, generator=self.generator, device=self.device)
            self.position = 0
        batch = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return batch


def nonprivate_step(
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    batches: ShuffledBatches,
    physical_batch_size: int | None,
) -> StepStats:
    batch = batches.next()
    chunk = physical_batch_size or len(batch)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for start in range(0, len(batch), chunk):
        part = batch[start : start + chunk]
        loss = F.cross_entropy(model(x[part]), y[part], reduction="sum")
        (loss / len(batch)).backward()  # accumulates to the mean over the whole batch
        loss_sum += float(loss.detach())
    optimizer.step()
    return StepStats(lot_size=len(batch), loss_sum=loss_sum, clipped_fraction=None)


@register_step(Algorithm.NONPRIVATE)
def nonprivate_steps(context: StepContext) -> Step:
    """The baseline's step: the next shuffled batch of the plan's lot size, from the run's shuffle stream."""
    x = context.x
    batches = ShuffledBatches(len(x), context.plan.lot_size, context.streams["shuffle"].generator(), x.device)
    return lambda step: nonprivate_step(
        model=context.model,
        optimizer=context.optimizer,
        x=x,
        y=context.y,
        batches=batches,
        physical_batch_size=context.spec.physical_batch_size,
    )

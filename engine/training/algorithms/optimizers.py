"""Update rules. Each consumes the privatized gradient only, so any of them is post-processing and
costs no privacy: plain SGD (Abadi et al. 2016), SGD with momentum, and Adam. Their names, as a spec gives
them, live in `engine.training.config.optimizer_keys`."""

from collections.abc import Iterable

import torch
from torch import nn

from engine.training.config.optimizer_keys import DEFAULT_MOMENTUM, OptimizerName


def make_optimizer(
    name: OptimizerName, params: Iterable[nn.Parameter], *, lr: float, momentum: float | None = None
) -> torch.optim.Optimizer:
    if name is OptimizerName.MOMENTUM:
        return torch.optim.SGD(params, lr=lr, momentum=DEFAULT_MOMENTUM if momentum is None else momentum)
    if name is OptimizerName.ADAM:
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


__all__ = ["DEFAULT_MOMENTUM", "OptimizerName", "make_optimizer", "set_learning_rate"]

"""Update rules. Each consumes the privatized gradient only, so any of them is post-processing and
costs no privacy: plain SGD (Abadi et al. 2016), SGD with momentum, and Adam."""

from collections.abc import Iterable
from enum import StrEnum

import torch
from torch import nn

DEFAULT_MOMENTUM = 0.9


class OptimizerName(StrEnum):
    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"


DESCRIPTIONS = {
    OptimizerName.SGD: "plain SGD: θ ← θ − η·g",
    OptimizerName.MOMENTUM: "SGD with heavy-ball momentum (key `momentum`, default 0.9)",
    OptimizerName.ADAM: "Adam (β = 0.9, 0.999) on the noisy gradient",
}


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

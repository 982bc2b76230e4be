"""torch.optim's update rules on stacked parameters, each member with its own learning rate and momentum."""

from collections.abc import Sequence

import torch
from torch import Tensor

from engine.training.config.optimizer_keys import OptimizerName


class StackedOptimizer:
    """torch.optim's SGD, momentum SGD and Adam (defaults) on stacked parameters, with each member's own
    learning rate and momentum: the same arithmetic as one optimizer per member."""

    def __init__(self, name: OptimizerName, params: dict[str, Tensor], momenta: Sequence[float]):
        self.name, self.params = name, params
        self.momentum = torch.tensor(
            list(momenta), dtype=next(iter(params.values())).dtype, device=next(iter(params.values())).device
        )
        self.state: dict[str, dict[str, Tensor]] = {}
        self.steps = 0

    def keep(self, alive: Tensor, params: dict[str, Tensor]) -> None:
        self.params = params
        self.momentum = self.momentum[alive]
        self.state = {n: {k: v[alive].contiguous() for k, v in s.items()} for n, s in self.state.items()}

    def step(self, grads: dict[str, Tensor], lrs: Tensor) -> None:
        self.steps += 1
        for name, p in self.params.items():
            g = grads[name]
            shape = (-1,) + (1,) * (p.dim() - 1)
            lr = lrs.view(shape)
            if self.name is OptimizerName.ADAM:
                self._adam(name, p, g, lr)
                continue
            if self.name is OptimizerName.MOMENTUM:
                buffer = self.state.setdefault(name, {}).get("momentum")
                if buffer is None:
                    buffer = g.clone()
                    self.state[name]["momentum"] = buffer
                else:
                    buffer.mul_(self.momentum.view(shape)).add_(g)
                g = buffer
            p.sub_(lr * g)

    def _adam(self, name: str, p: Tensor, g: Tensor, lr: Tensor, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        state = self.state.setdefault(name, {"m": torch.zeros_like(p), "v": torch.zeros_like(p)})
        state["m"].lerp_(g, 1 - betas[0])
        state["v"].mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
        bias1, bias2 = 1 - betas[0] ** self.steps, 1 - betas[1] ** self.steps
        denominator = (state["v"].sqrt() / bias2**0.5).add_(eps)
        p.sub_((lr / bias1) * state["m"] / denominator)

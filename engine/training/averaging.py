"""The exponential moving average (EMA) of the iterates (De et al. 2022 average DP-SGD's parameters this way):
after step t the average moves toward the new parameters θₜ,

    θ̄ₜ = βₜ θ̄ₜ₋₁ + (1 − βₜ) θₜ,   βₜ = min(β, (1 + t) / (10 + t)),   θ̄₀ = θ₀,

the warm-up of TensorFlow's `tf.train.ExponentialMovingAverage` with `num_updates` = t (its decay
min(decay, (1 + num_updates) / (10 + num_updates))), so the first averages are not dominated by the
initialization. The average is what the run evaluates and releases: the test accuracy and loss of every record
and of the result. It is computed from the released iterates alone, so it is post-processing: no ε.

β = 0 is off: no average exists (`iterate_average` returns None) and the run is the plain run bit for bit.
"""

import copy

import torch
from torch import nn

WARMUP_OFFSET = 10  # TensorFlow's (1 + t) / (10 + t)


def warmup_decay(decay: float, step: int) -> float:
    """βₜ of step t (1-based): min(β, (1 + t) / (10 + t))."""
    return min(decay, (1.0 + step) / (WARMUP_OFFSET + step))


class IterateAverage:
    """The moving average of a model's parameters, kept in a copy of the model (`model`), which is evaluated."""

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.model = copy.deepcopy(model).requires_grad_(False)
        self.steps = 0
        self._averaged = list(self.model.parameters())
        self._source = list(model.parameters())
        self._buffers = list(zip(self.model.buffers(), model.buffers(), strict=True))

    @torch.no_grad()
    def update(self) -> None:
        """Fold in the source model's parameters after one more step (buffers, if any, are copied)."""
        self.steps += 1
        weight = 1.0 - warmup_decay(self.decay, self.steps)  # θ̄ ← θ̄ + (1 − βₜ)(θ − θ̄)
        torch._foreach_lerp_(self._averaged, self._source, weight)
        for mine, theirs in self._buffers:
            mine.copy_(theirs)


def iterate_average(model: nn.Module, decay: float) -> IterateAverage | None:
    """The average of `model`'s iterates at `decay` (a spec's `ema_decay`); None at 0: off."""
    return IterateAverage(model, decay) if decay > 0 else None


__all__ = ["IterateAverage", "iterate_average", "warmup_decay"]

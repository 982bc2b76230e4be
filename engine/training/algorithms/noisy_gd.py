"""Noisy gradient descent (Near & Abuah, *Programming Differential Privacy*, ch. "Machine
Learning"): logistic regression with labels ±1, full batch, and at every step

    θ ← θ − η · (Σᵢ clip(∇ℓ(θ; xᵢ, yᵢ)) + N(0, σ²b²I)) / ñ,   ñ = N + Lap(1/ε_count), drawn once.

Two ways to bound the sensitivity b of the gradient sum:

- ``gradient``: clip each per-example gradient to L2 norm b (as DP-SGD does, with q = 1);
- ``input``: clip each *input* to L2 norm b. The logistic loss ℓ(θ; x, y) = log(1 + exp(−y θ·x))
  has ∇ℓ = −y·x·s(−y θ·x) with the sigmoid s ∈ (0, 1), so ‖∇ℓ‖ ≤ ‖x‖ ≤ b for every θ: no
  per-example gradients are needed at all (the book's "Lipschitz loss" remark). This needs a model
  without a separate bias: `BinaryLogistic` has none, and its intercept is the weight of a constant
  feature 1 appended to every input (`with_constant_feature`), so clipping the augmented input
  bounds the whole gradient.
"""

import math

import torch
from torch import Tensor, nn

from engine.training.algorithms.dpsgd import clip_and_accumulate, drawn_ahead, stats_of
from engine.training.algorithms.registry import Step, StepContext, StepStats, register_step
from engine.training.clipping import clip_factors, make_clipper
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.noise import RandomSource, uniform
from engine.training.noise_ahead import NoiseAhead, add_step_noise


class BinaryLogistic(nn.Module):
    """θ ∈ ℝᵈ, no intercept. Outputs the logits (0, θ·x), so softmax cross-entropy with classes
    {0, 1} is exactly the logistic loss with labels y = ±1: CE((0, z), 1) = log(1 + e^{−z})."""

    def __init__(self, n_features: int):
        super().__init__()
        self.linear = nn.Linear(n_features, 1, bias=False)
        nn.init.zeros_(self.linear.weight)  # the book starts from θ = 0

    def forward(self, x: Tensor) -> Tensor:
        z = self.linear(x)
        return torch.cat([torch.zeros_like(z), z], dim=1)


def with_constant_feature(x: Tensor) -> Tensor:
    """[x, 1]: the intercept as an ordinary weight."""
    return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype, device=x.device)], dim=1)


def clip_rows(x: Tensor, bound: float) -> Tensor:
    """Each row scaled to L2 norm ≤ bound (a per-example map: it needs no statistic of the data), by
    the gradient clipper's exact factors, so the bound holds in floating point too."""
    return x * clip_factors(torch.linalg.vector_norm(x, dim=1), bound)[:, None]


def noisy_count(n: int, *, epsilon: float, generator: RandomSource) -> float:
    """N + Laplace(1/ε) (sensitivity 1), floored at 1 so the denominator stays positive (post-processing)."""
    u = uniform(generator) - 0.5  # in [-1/2, 1/2)
    u = max(u, -0.5 + 2.0**-53)  # keep the inverse CDF finite
    noise = -(1.0 / epsilon) * math.copysign(1.0, u) * math.log1p(-2.0 * abs(u))  # Laplace(0, 1/ε)
    return max(1.0, n + noise)


def gradient_sum_of_clipped_inputs(model: nn.Module, params: list[nn.Parameter], x: Tensor, y: Tensor):
    """Σᵢ ∇ℓᵢ on inputs already clipped to norm b: one ordinary backward pass."""
    losses = nn.functional.cross_entropy(model(x), y, reduction="none")
    grads = torch.autograd.grad(losses.sum(), params)
    return [g.detach().clone() for g in grads], losses.sum().detach()


def noisy_gd_step(
    *,
    step: int,
    clipper,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    plan: TrainingPlan,
    denominator: float,
    physical_batch_size: int | None,
    noise_generator: RandomSource,
    noise_ahead: NoiseAhead | None = None,
) -> StepStats:
    """One step of noisy gradient descent over the whole data; with `noise_ahead` (drawing from
    `noise_generator`), the same noise drawn while the step computed its gradient."""
    bound = plan.clip_norm_at(step)
    optimizer.zero_grad(set_to_none=True)
    if plan.clipping == "input":
        grads, loss_sum = gradient_sum_of_clipped_inputs(clipper.model, clipper.params, clip_rows(x, bound), y)
        stats = StepStats(lot_size=len(x), loss_sum=float(loss_sum), clipped_fraction=None)
    else:
        clipped = clip_and_accumulate(clipper, x, y, bound, physical_batch_size)
        grads, stats = clipped.grads, stats_of(clipped, len(x))
    std = plan.noise_multiplier_at(step) * bound
    noisy = add_step_noise(grads, step, std, noise_generator, noise_ahead)
    for param, g in zip(clipper.params, noisy, strict=True):
        param.grad = g.div_(denominator)
    optimizer.step()
    return stats


@register_step(Algorithm.NOISY_GD)
def noisy_gd_steps(context: StepContext) -> Step:
    """Noisy GD's step over the whole data, divided by the noisy count ñ drawn once here (from the count stream),
    its noise drawn a step ahead."""
    clipper = make_clipper(context.model)
    plan, streams = context.plan, context.streams
    denominator = noisy_count(len(context.x), epsilon=plan.count_epsilon, generator=streams["count"])
    ahead = drawn_ahead(clipper, plan, streams)
    return lambda step: noisy_gd_step(
        step=step,
        clipper=clipper,
        optimizer=context.optimizer,
        x=context.x,
        y=context.y,
        plan=plan,
        denominator=denominator,
        physical_batch_size=context.spec.physical_batch_size,
        noise_generator=streams["noise"],
        noise_ahead=ahead,
    )

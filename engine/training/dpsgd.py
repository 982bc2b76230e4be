"""DP-SGD (Abadi et al. 2016; seeds 001 and 003) as a chain of named stages:

    sample a Poisson lot → clip and accumulate → add Gaussian noise → scale by 1/L → optimizer step

`DpSgdPlan` is the frozen bundle of the numbers the loop runs with and the DP event that accounts
for exactly those numbers, so what is trained and what is charged cannot drift apart.
"""

import math
from dataclasses import dataclass

import torch
from dp_accounting import dp_event
from torch import Tensor

from engine.privacy import PrivacyLedger, calibrate_noise_multiplier, dpsgd_step_event, single_phase
from engine.training.clipping import BookKeepingClipper, MaterializedClipper
from engine.training.spec import RunSpec


@dataclass(frozen=True, kw_only=True)
class DpSgdPlan:
    n_train: int
    expected_lot_size: int  # L: a public constant, the denominator of every update
    noise_multiplier: float  # σ: noise std is σ·C
    clip_norm: float  # C
    steps: int
    delta: float

    @property
    def sampling_rate(self) -> float:
        return self.expected_lot_size / self.n_train

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.clip_norm

    def step_event(self) -> dp_event.DpEvent:
        return dpsgd_step_event(sampling_rate=self.sampling_rate, noise_multiplier=self.noise_multiplier)

    def ledger(self, steps: int | None = None) -> PrivacyLedger:
        """The privacy ledger of the first `steps` steps (all of them by default)."""
        label = (f"DP-SGD step (Gaussian noise σ = {self.noise_multiplier:.4g} on gradients clipped to C = "
                 f"{self.clip_norm:g}, Poisson lots q = {self.sampling_rate:.4g})")  # fmt: skip
        return single_phase(self.step_event(), self.steps if steps is None else steps, label=label)


def steps_for(*, epochs: float, n_train: int, lot_size: int) -> int:
    """Number of steps: an epoch is N/L steps of expected lot size L."""
    return max(1, math.ceil(epochs * n_train / lot_size - 1e-9))


def plan_dpsgd(spec: RunSpec, *, n_train: int) -> DpSgdPlan:
    steps = steps_for(epochs=spec.epochs, n_train=n_train, lot_size=spec.lot_size)
    sigma = spec.noise_multiplier
    if sigma is None:
        sigma = calibrate_noise_multiplier(
            target_epsilon=spec.target_epsilon, delta=spec.delta, sampling_rate=spec.lot_size / n_train, steps=steps
        )
    return DpSgdPlan(
        n_train=n_train,
        expected_lot_size=spec.lot_size,
        noise_multiplier=sigma,
        clip_norm=spec.clip_norm,
        steps=steps,
        delta=spec.delta,
    )


# ------------------------------------------------------------------------------------ stages


def sample_poisson_lot(n: int, rate: float, generator: torch.Generator, device: torch.device) -> Tensor:
    """Indices of a lot in which each of n examples is included independently with probability `rate`."""
    return torch.nonzero(torch.rand(n, generator=generator, device=device) < rate).squeeze(1)


def add_gaussian_noise(grads: list[Tensor], std: float, generator: torch.Generator) -> list[Tensor]:
    """Add N(0, std²) to every coordinate, in place (one noise buffer per tensor, no other temporaries)."""
    for g in grads:
        g.add_(torch.empty_like(g).normal_(0.0, std, generator=generator))
    return grads


def scale(grads: list[Tensor], factor: float) -> list[Tensor]:
    """Multiply in place by a public constant (1/L)."""
    for g in grads:
        g.mul_(factor)
    return grads


@dataclass(frozen=True)
class StepStats:
    """What one step saw of the private lot: diagnostics, never released."""

    lot_size: int
    loss_sum: float
    clipped_fraction: float


def dpsgd_step(
    *,
    clipper: BookKeepingClipper | MaterializedClipper,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    plan: DpSgdPlan,
    sampling_generator: torch.Generator,
    noise_generator: torch.Generator,
) -> StepStats:
    lot = sample_poisson_lot(len(x), plan.sampling_rate, sampling_generator, x.device)
    clipped = clipper.clipped_sum(x[lot], y[lot], plan.clip_norm)
    noisy = add_gaussian_noise(clipped.grads, plan.noise_std, noise_generator)
    update = scale(noisy, 1.0 / plan.expected_lot_size)
    for param, g in zip(clipper.params, update, strict=True):
        param.grad = g
    optimizer.step()
    n = int(lot.numel())
    fraction = float((clipped.norms > plan.clip_norm).float().mean()) if n else 0.0
    return StepStats(lot_size=n, loss_sum=float(clipped.loss_sum), clipped_fraction=fraction)

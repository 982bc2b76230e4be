"""DP-SGD (Abadi et al. 2016) as a chain of named stages:

    sample a Poisson lot → clip and accumulate (over physical batches) → add Gaussian noise of std σₜCₜ
    (`noise_std`) → scale by 1/L (`average`) → optimizer step

A lot is what the privacy analysis sees; physical batches are how it fits in memory (Abadi et al.'s
lot vs batch, Opacus' BatchMemoryManager): the clipped sums of the batches of one lot are added
before the single noise draw, so the release is the same whatever the physical batch size.
The numbers come from a `TrainingPlan`, whose ledger accounts for exactly them; the lots and the noise
from the run's random streams (`noise`: reproducible lab streams or release-mode OS randomness).
The vectorized stack (`engine.training.trainers.stack`) runs the same noise and scaling stages on each member's
rows. `dpsgd_steps` is DP-SGD's entry in the step registry (`algorithms.registry`).

Augmentation multiplicity (De et al. 2022, §3.1): with an `Augmentation` of K copies, each physical batch of the
lot is augmented just before clipping (its examples' K augmented copies, example-major, labels repeated), and the
clipper averages each example's K copies' gradients before clipping it as one example (`clipped_sum(...,
multiplicity=K)`): one example still moves the clipped sum by at most C, so the privacy analysis is unchanged,
while the averaged gradient has less variance. A physical batch then holds max(1, physical_batch_size // K)
examples, about physical_batch_size rows, so memory stays about the same; a step costs about K plain ones.
"""

import functools
import math
from typing import Protocol

import torch
from torch import Tensor

from engine.training.algorithms.dpsgd_graph import StepGraph, step_graph_for
from engine.training.algorithms.registry import Step, StepContext, StepStats, register_step
from engine.training.canaries import GradientCanaries
from engine.training.clipping import (
    BookKeepingClipper,
    ClippedSum,
    MaterializedClipper,
    make_clipper,
    per_layer_thresholds,
)
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.noise import RandomSource, sample_poisson_lot
from engine.training.noise_ahead import NoiseAhead, add_step_noise, step_noise

Clipper = BookKeepingClipper | MaterializedClipper


class Augmentation(Protocol):
    """K augmented copies of each example: (n, F) flattened inputs → (n·K, F), rows iK … iK+K−1 example i's copies,
    drawn from the augmentation's own (public) randomness (`engine.training.augmentation`)."""

    multiplicity: int

    def __call__(self, x: Tensor) -> Tensor: ...


# ------------------------------------------------------------------------------------ stages


def scale(grads: list[Tensor], factor: float) -> list[Tensor]:
    """Multiply in place by a public constant (1/L)."""
    for g in grads:
        g.mul_(factor)
    return grads


def noise_std(plan: TrainingPlan, step: int) -> float:
    """σₜ·Cₜ: the standard deviation of the Gaussian noise added to step t's clipped sum (Abadi et al. 2016,
    Algorithm 1: N(0, σ²C²I)), at the plan's σ and C of that step (their schedules)."""
    return plan.noise_multiplier_at(step) * plan.clip_norm_at(step)


def average(grads: list[Tensor], plan: TrainingPlan) -> list[Tensor]:
    """The noisy sum divided by the expected lot size L = qN, in place (Abadi et al. 2016, Algorithm 1's 1/L):
    L is public; the sampled lot's size is private and never divides the update. Any tensors, stacked or not."""
    return scale(grads, 1.0 / plan.lot_size)


def clip_and_accumulate(
    clipper: Clipper,
    x: Tensor,
    y: Tensor,
    clip_norm: float | tuple[float, ...],
    physical_batch_size: int | None,
    augmentation: Augmentation | None = None,
) -> ClippedSum:
    """Σᵢ clip(gᵢ) over the rows of x, computed `physical_batch_size` rows at a time. With `augmentation` (K copies
    per example), each physical batch of max(1, physical_batch_size // K) examples is augmented just before it is
    clipped, each example's gradient being the mean of its copies'; norms and flags stay one per example."""
    if augmentation is None:
        examples = physical_batch_size

        def clip(xs: Tensor, ys: Tensor) -> ClippedSum:
            return clipper.clipped_sum(xs, ys, clip_norm)
    else:
        copies = augmentation.multiplicity
        examples = None if physical_batch_size is None else max(1, physical_batch_size // copies)

        def clip(xs: Tensor, ys: Tensor) -> ClippedSum:
            if not len(xs):
                return clipper.clipped_sum(xs, ys, clip_norm, multiplicity=copies)
            return clipper.clipped_sum(augmentation(xs), ys.repeat_interleave(copies), clip_norm, multiplicity=copies)

    if examples is None or len(x) <= examples:
        return clip(x, y)
    total: ClippedSum | None = None
    norms, clipped = [], []
    for start in range(0, len(x), examples):
        part = clip(x[start : start + examples], y[start : start + examples])
        norms.append(part.norms)
        clipped.append(part.clipped)
        if total is None:
            total = part
        else:  # add in place: memory stays one batch's worth plus one gradient
            for acc, g in zip(total.grads, part.grads, strict=True):
                acc.add_(g)
            correct = None if total.correct is None or part.correct is None else total.correct + part.correct
            total = ClippedSum(
                grads=total.grads,
                norms=total.norms,
                loss_sum=total.loss_sum + part.loss_sum,
                clipped=total.clipped,
                correct=correct,
            )
    return ClippedSum(
        grads=total.grads,
        norms=torch.cat(norms),
        loss_sum=total.loss_sum,
        clipped=torch.cat(clipped),
        correct=total.correct,
    )


def clip_thresholds(clipper: Clipper, clip_norm: float, clipping: str | None) -> float | tuple[float, ...]:
    """Flat: one threshold C. Per layer: equal thresholds C/√K for K layers, whose squares sum to C²,
    so the whole clipped gradient still has norm ≤ C and the accounting is unchanged."""
    if clipping == "per_layer":
        return per_layer_thresholds(clip_norm, len(clipper.layer_names))
    return clip_norm


GRAD_NORM_QUANTILES = (0.1, 0.5, 0.9)


@functools.lru_cache(maxsize=4096)
def quantile_positions(
    n: int, quantiles: tuple[float, ...] = GRAD_NORM_QUANTILES
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """For the linear interpolation of `torch.quantile` (and numpy's default) over n sorted values: the
    indices (low, high per quantile, flattened) and the weight of the high one."""
    indices, weights = [], []
    for q in quantiles:
        position = q * (n - 1)
        low = math.floor(position)
        indices += [low, min(low + 1, n - 1)]
        weights.append(position - low)
    return tuple(indices), tuple(weights)


@functools.lru_cache(maxsize=4096)
def _index_tensor(indices: tuple[int, ...], device: torch.device) -> Tensor:
    return torch.tensor(indices, dtype=torch.long, device=device)


def norm_quantiles(norms: Tensor) -> tuple[float, ...]:
    """`GRAD_NORM_QUANTILES` of the per-example norms: one sort of n values, six of them read back
    (torch.quantile does the same work with several times the per-call overhead on small lots)."""
    return norm_quantiles_by_row(norms[None])[0]


def norm_quantiles_by_row(norms: Tensor) -> list[tuple[float, ...]]:
    """`norm_quantiles` of each row of a (K, n) tensor (the members of a vectorized stack): one sort, one read."""
    indices, weights = quantile_positions(norms.shape[1])
    rows = torch.sort(norms.detach(), dim=1).values[:, _index_tensor(indices, norms.device)].tolist()
    return [tuple(lo + (hi - lo) * w for lo, hi, w in zip(b[::2], b[1::2], weights, strict=True)) for b in rows]


def stats_of(clipped: ClippedSum, n: int) -> StepStats:
    """The step's diagnostics from what clipping computed anyway: no extra pass over the lot."""
    if not n:
        return StepStats(lot_size=0, loss_sum=float(clipped.loss_sum), clipped_fraction=None)
    p10, p50, p90 = norm_quantiles(clipped.norms)
    return StepStats(
        lot_size=n,
        loss_sum=float(clipped.loss_sum),
        clipped_fraction=float(clipped.clipped.float().mean()),
        grad_norm_p10=p10,
        grad_norm_p50=p50,
        grad_norm_p90=p90,
        correct=None if clipped.correct is None else round(float(clipped.correct)),  # a mean over copies with K > 1
    )


def dpsgd_step(
    *,
    step: int,
    clipper: Clipper,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    plan: TrainingPlan,
    physical_batch_size: int | None,
    sampling_generator: RandomSource,
    noise_generator: RandomSource,
    canaries: GradientCanaries | None = None,
    noise_ahead: NoiseAhead | None = None,
    step_graph: StepGraph | None = None,
    augmentation: Augmentation | None = None,
) -> StepStats:
    """Step `step` (1-based) of the plan; the lot and the noise come from the run's streams (`noise`). With
    `canaries` (an audited run), the canaries in this lot join the clipped sum and the noisy sum scores them.
    With `noise_ahead` (drawing from `noise_generator`), the noise was drawn while this step clipped: the same
    draws, off the step's critical path. With `step_graph` (on a GPU), a lot that fits its capacity runs the
    clip → noise → 1/L stages as one CUDA graph replay over a padded, masked lot (`step_graph`). With `augmentation`
    (augmentation multiplicity, K copies per example), each physical batch is augmented just before clipping and
    each example's gradient is the mean of its copies' (`clip_and_accumulate`); the step then runs eagerly, never
    as the step graph, which replays fixed input rows (canaries, if any, join the clipped sum as without)."""
    clip_norm = plan.clip_norm_at(step)
    optimizer.zero_grad(set_to_none=True)  # the last update's gradient need not outlive it
    lot = sample_poisson_lot(len(x), plan.sampling_rate, sampling_generator, x.device)
    thresholds = clip_thresholds(clipper, clip_norm, plan.clipping)
    if step_graph is not None and canaries is None and augmentation is None and step_graph.fits(int(lot.numel())):
        noise = step_noise(clipper.params, step, noise_std(plan, step), noise_generator, noise_ahead)
        clipped = step_graph.run(x, y, lot, thresholds, noise)
        update = clipped.grads
    else:
        clipped, update = eager_stages(
            clipper=clipper,
            x=x[lot],
            y=y[lot],
            thresholds=thresholds,
            physical_batch_size=physical_batch_size,
            step=step,
            plan=plan,
            noise_generator=noise_generator,
            canaries=canaries,
            noise_ahead=noise_ahead,
            augmentation=augmentation,
        )
    for param, g in zip(clipper.params, update, strict=True):
        param.grad = g
    optimizer.step()
    return stats_of(clipped, int(lot.numel()))


def eager_stages(
    *,
    clipper: Clipper,
    x: Tensor,
    y: Tensor,
    thresholds: float | tuple[float, ...],
    physical_batch_size: int | None,
    step: int,
    plan: TrainingPlan,
    noise_generator: RandomSource,
    canaries: GradientCanaries | None,
    noise_ahead: NoiseAhead | None,
    augmentation: Augmentation | None = None,
) -> tuple[ClippedSum, list[Tensor]]:
    """The lot's clip → (canaries) → noise → 1/L stages, one kernel at a time: (its clipped sum, the update); with
    `augmentation`, over each example's augmented copies (`clip_and_accumulate`)."""
    clipped = clip_and_accumulate(clipper, x, y, thresholds, physical_batch_size, augmentation)
    canary_norm = min(thresholds) if isinstance(thresholds, tuple) else thresholds  # within every layer's threshold
    if canaries is not None:
        canaries.insert(clipped.grads, rate=plan.sampling_rate, magnitude=canary_norm)
    std = noise_std(plan, step)
    noisy = add_step_noise(clipped.grads, step, std, noise_generator, noise_ahead)
    if canaries is not None:
        canaries.observe(noisy, magnitude=canary_norm, noise_std=std, rate=plan.sampling_rate)
    return clipped, average(noisy, plan)


def drawn_ahead(clipper: Clipper, plan: TrainingPlan, streams) -> NoiseAhead:
    """The run's Gaussian noise drawn a step ahead, from its noise stream (`engine.training.noise_ahead`)."""
    return NoiseAhead(clipper.params, functools.partial(noise_std, plan), streams["noise"], last_step=plan.steps)


@register_step(Algorithm.DPSGD)
def dpsgd_steps(context: StepContext) -> Step:
    """DP-SGD's step with its noise drawn ahead; with the audit's canaries or an augmentation each lot runs its
    stages eagerly, and without them (on a GPU) through the step graph (`dpsgd_graph.step_graph_for`)."""
    spec, plan, streams = context.spec, context.plan, context.streams
    clipper = make_clipper(context.model)
    ahead = drawn_ahead(clipper, plan, streams)
    graph = None
    if context.canaries is None and context.augmentation is None:  # the graph replays fixed rows, no canaries
        graph = step_graph_for(
            clipper,
            context.x,
            context.y,
            n_train=len(context.x),
            sampling_rate=plan.sampling_rate,
            lot_size=plan.lot_size,
            physical_batch_size=spec.physical_batch_size,
        )
    return lambda step: dpsgd_step(
        step=step,
        clipper=clipper,
        optimizer=context.optimizer,
        x=context.x,
        y=context.y,
        plan=plan,
        physical_batch_size=spec.physical_batch_size,
        sampling_generator=streams["sampling"],
        noise_generator=streams["noise"],
        canaries=context.canaries,
        noise_ahead=ahead,
        step_graph=graph,
        augmentation=context.augmentation,
    )

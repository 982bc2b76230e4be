"""Anisotropic DP-SGD (Xiang et al., "Differentially private deep learning from an
optimization perspective"), in a form whose privacy is that of DP-SGD at the same σ.

Seed 002's idea: the loss is more sensitive to some parameters than to others, so put more noise where
it is insensitive and less where it is sensitive. Done naively (noise N(0, diag(σᵢ²C²)) on gradients
clipped in the ordinary L2 norm) the coordinates with σᵢ < σ are under-noised and the run is not private
at the isotropic σ. The honest form: with positive weights w (one per layer or one per coordinate,
W = diag(w)),

    clip each per-example gradient in the weighted norm:  ḡᵢ = gᵢ · min(1, C/‖W⁻¹gᵢ‖₂)
    release the sum plus anisotropic noise:               Σᵢ ḡᵢ + σC·W z,  z ~ N(0, I)
    divide by the expected lot size L, optimizer step     (as DP-SGD: `dpsgd`)

Why it is private at σ: multiply the release by the fixed invertible W⁻¹. It becomes Σᵢ W⁻¹ḡᵢ + σC z,
where every W⁻¹ḡᵢ has L2 norm ≤ C: exactly the sampled Gaussian mechanism with noise multiplier σ
(Poisson lots of rate q = L/N, as DP-SGD). Multiplying back by W is post-processing, so each step costs
what a DP-SGD step at σ costs and the plan's ledger (`plan.step_release`) accounts for it unchanged, as
long as W at step t is fixed before step t's lot is touched: W may depend on public numbers and on the
releases of steps 1…t−1, never on un-noised private data (it would then itself leak).

The weights (`ReleasedGradientWeights`): a running average (β = `aniso_smoothing`) of the squared
released update ĝ = (Σᵢ ḡᵢ + σCWz)/L, minus the running average of its noise variance (σCwⱼ/L)², which
is public (σ, C, w and L are), estimates the squared gradient signal per coordinate; per layer it is
averaged over the layer's coordinates. The sensitivity estimate is sⱼ = max(that, floorⱼ), floorⱼ being
the standard error of the estimate when ĝ is pure noise (public; `sensitivity_estimate`): a signal the
releases cannot tell from none gets the floor, and groups that all sit on it get equal weights (with
DP-SGD's small per-coordinate signal-to-noise, most coordinates do). Seed 002's objective, the expected
loss increase
from the noise Σⱼ sⱼ·(σCwⱼ)², is minimized under a fixed volume of the clipping region
{g : ‖W⁻¹g‖ ≤ C} (volume ∝ Πⱼ wⱼ over coordinates, so Σⱼ log wⱼ = 0, weights of geometric mean 1;
without the constraint w → 0 would minimize the noise by clipping everything away). Lagrange gives
wⱼ ∝ sⱼ^(−1/2): more noise where the released signal is weaker. The weights are then kept within
[1/r, r] (r = `aniso_max_ratio`) by clamping log w to [−log r, log r] *with* the normalizing shift
chosen so that the clamped weights still have geometric mean exactly 1 (bisection over the shift;
`weights_from_sensitivity`). For "layer" the geometric mean is over coordinates (a layer of n
coordinates counts n times), as the volume is. Until `WARMUP_STEPS` releases have been averaged the
weights are 1 (isotropic: DP-SGD itself). The running averages are not bias-corrected: the correction
1/(1−βᵗ) is common to both and cancels in the normalization.

"layer" means the clipper's layers (weight and bias of a module together): a model of one layer
(logistic regression) then has the single weight 1 and this *is* DP-SGD; "coordinate" gives every
parameter its own weight. With all weights 1 (also: `aniso_max_ratio` = 1) a step is bit for bit a
DP-SGD step with flat clipping at C, the same lot and the same noise draws.

Per-example weighted norms: for "layer" on a `BookKeepingClipper` model, its ghost per-layer squared
norms, each divided by w_k² (no per-example gradient is built); for "coordinate" on a model of linear
layers, the same book-keeping pass with the quadratic form (δᵢ²)ᵀ(1/W²)(aᵢ²) per layer (still no
per-example gradient); otherwise (convolutions per coordinate, or a model only the `MaterializedClipper`
handles) per-example gradients from `torch.func`, as `MaterializedClipper` computes them.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from engine.training.algorithms.dpsgd import StepStats, average, clip_and_accumulate, noise_std, stats_of
from engine.training.clipping import (
    BookKeepingClipper,
    ClippedSum,
    MaterializedClipper,
    clip_factors,
    count_correct,
    row_sq_norms,
)
from engine.training.clipping.rules import linear_norms_and_sum
from engine.training.clipping.sums import zero_sum
from engine.training.config.plan import TrainingPlan
from engine.training.noise import RandomSource, add_gaussian_noise, sample_poisson_lot

Granularity = Literal["layer", "coordinate"]
GRANULARITIES: tuple[str, ...] = ("layer", "coordinate")
WARMUP_STEPS = 10  # releases averaged before the weights leave 1
BISECTION_STEPS = 60  # of the normalizing shift in log space: the interval shrinks by 2⁻⁶⁰
DEFAULT_SMOOTHING = 0.9
DEFAULT_MAX_RATIO = 10.0


# ------------------------------------------------------------------------------ the weight rule


def sensitivity_estimate(mean_square: Tensor, noise_variance: Tensor, sizes: Tensor, smoothing: float) -> Tensor:
    """sⱼ = max(EMA(ĝⱼ²) − EMA(vⱼ), floorⱼ) per group j (a layer or a coordinate), vⱼ the noise variance of ĝ.

    floorⱼ is the standard error of that difference when ĝ is pure noise: a mean of nⱼ squared Gaussians
    of variance vⱼ has variance 2vⱼ²/nⱼ, and the running average multiplies it by (1 − β)/(1 + β). A signal
    below it cannot be told from none, so every such group gets the same (relative) floor. Public: it
    depends on σ, C, L, w, β and the layer sizes only."""
    standard_error = noise_variance * torch.sqrt(2 * (1 - smoothing) / (1 + smoothing) / sizes)
    floor = torch.clamp(standard_error, min=torch.finfo(noise_variance.dtype).tiny)
    return torch.maximum(mean_square - noise_variance, floor)


def weights_from_sensitivity(sensitivity: Tensor, sizes: Tensor, max_ratio: float) -> Tensor:
    """w ∝ s^(−1/2) with Σ sizes·log w = 0 (geometric mean 1 over coordinates) and w ∈ [1/r, r].

    log w = clamp(−½ log s − t, −log r, log r) with the shift t that makes the size-weighted sum 0: that
    sum falls monotonically in t, from +log r·Σsizes to −log r·Σsizes, so bisection finds it."""
    if max_ratio < 1.0:
        raise ValueError(f"max_ratio must be ≥ 1, got {max_ratio}")
    bound = math.log(max_ratio)
    if bound == 0.0:
        return torch.ones_like(sensitivity)
    target = -0.5 * sensitivity.log()
    low, high = target.min() - bound, target.max() + bound
    for _ in range(BISECTION_STEPS):  # tensor ops only: no device sync
        mid = (low + high) / 2
        above = ((target - mid).clamp(-bound, bound) * sizes).sum() > 0
        low, high = torch.where(above, mid, low), torch.where(above, high, mid)
    return (target - (low + high) / 2).clamp(-bound, bound).exp()


@dataclass(frozen=True)
class WeightLayout:
    """How weights map onto the trained parameters: one per layer (`param_layers[i]`: the layer of
    parameter i) or one per coordinate (the parameters flattened and concatenated, in order)."""

    granularity: Granularity
    shapes: tuple[torch.Size, ...]
    param_layers: tuple[int, ...]
    device: torch.device

    @property
    def groups(self) -> int:
        if self.granularity == "layer":
            return max(self.param_layers, default=-1) + 1
        return sum(math.prod(s) for s in self.shapes)

    def sizes(self) -> Tensor:
        """Coordinates per group, float64."""
        if self.granularity == "coordinate":
            return torch.ones(self.groups, dtype=torch.float64, device=self.device)
        sizes = torch.zeros(self.groups, dtype=torch.float64, device=self.device)
        for shape, layer in zip(self.shapes, self.param_layers, strict=True):
            sizes[layer] += math.prod(shape)
        return sizes

    def mean_squares(self, tensors: Sequence[Tensor]) -> Tensor:
        """Per group, the mean of the squared coordinates of `tensors` (aligned with the parameters), float64."""
        if self.granularity == "coordinate":
            return torch.cat([t.detach().reshape(-1).double().square() for t in tensors])
        sums = torch.zeros(self.groups, dtype=torch.float64, device=self.device)
        for t, layer in zip(tensors, self.param_layers, strict=True):
            sums[layer] += t.detach().double().square().sum()
        return sums / self.sizes()

    def per_param(self, group_weights: Tensor, dtype: torch.dtype) -> list[Tensor]:
        """The weights of each parameter: 0-d (one per layer) or of the parameter's shape."""
        if self.granularity == "layer":
            cast = group_weights.to(dtype)
            return [cast[layer] for layer in self.param_layers]
        parts = group_weights.to(dtype).split([math.prod(s) for s in self.shapes])
        return [part.view(shape) for part, shape in zip(parts, self.shapes, strict=True)]


class ReleasedGradientWeights:
    """W, a function of public numbers and the released noisy updates only.

    `observe` is the only way information comes in, and it takes nothing but a release (the noisy
    update ĝ that the optimizer is handed, which DP-SGD's accounting already charges for) and public
    numbers (σC and L of that step); the weights it had when the release was made are its own state,
    itself a function of earlier releases. So W at step t is post-processing of releases 1…t−1."""

    def __init__(
        self,
        layout: WeightLayout,
        *,
        smoothing: float = DEFAULT_SMOOTHING,
        max_ratio: float = DEFAULT_MAX_RATIO,
        warmup: int = WARMUP_STEPS,
    ):
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.layout, self.smoothing, self.max_ratio, self.warmup = layout, smoothing, max_ratio, warmup
        self.sizes = layout.sizes()
        self.group_weights = torch.ones(layout.groups, dtype=torch.float64, device=layout.device)
        self.mean_square = torch.zeros_like(self.group_weights)  # EMA of ĝ², per group
        self.noise_variance = torch.zeros_like(self.group_weights)  # EMA of the noise variance of ĝ, per group
        self.observed = 0

    def observe(self, released: Sequence[Tensor], *, noise_std: float, lot_size: int) -> None:
        """Fold in one released update ĝ (noise σC·W z, divided by L); `noise_std` = σC, `lot_size` = L."""
        beta = self.smoothing
        variance = (noise_std / lot_size) ** 2 * self.group_weights.square()
        self.mean_square.mul_(beta).add_(self.layout.mean_squares(released), alpha=1 - beta)
        self.noise_variance.mul_(beta).add_(variance, alpha=1 - beta)
        self.observed += 1
        if self.observed >= self.warmup:
            estimate = sensitivity_estimate(self.mean_square, self.noise_variance, self.sizes, self.smoothing)
            self.group_weights = weights_from_sensitivity(estimate, self.sizes, self.max_ratio)

    def per_param(self, dtype: torch.dtype) -> list[Tensor]:
        return self.layout.per_param(self.group_weights, dtype)


# ------------------------------------------------------------------------------ weighted clipping


def _param_layers(clipper: BookKeepingClipper | MaterializedClipper) -> tuple[int, ...]:
    """The layer (index into `clipper.layer_names`) of each of `clipper.params`."""
    if isinstance(clipper, MaterializedClipper):
        return tuple(clipper.layer_of)
    owner = {id(p): k for k, m in enumerate(clipper.layers) for p in m.parameters(recurse=False)}
    return tuple(owner[id(p)] for p in clipper.params)


class WeightedClipper:
    """Clipped sums Σᵢ gᵢ·min(1, C/‖W⁻¹gᵢ‖₂) with W read from `weights` at every call.

    Has the clippers' `clipped_sum(x, y, clip_norm)`, so `clip_and_accumulate` splits a lot into
    physical batches for it as for them. `norms` of the result are the weighted norms ‖W⁻¹gᵢ‖₂."""

    def __init__(self, base: BookKeepingClipper | MaterializedClipper, weights: ReleasedGradientWeights):
        self.base, self.weights = base, weights
        self.model: nn.Module = base.model
        self.params = base.params
        self.layer_names = base.layer_names
        self._names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        book_keeping = isinstance(base, BookKeepingClipper)
        self._ghost = book_keeping and weights.layout.granularity == "layer"
        # per coordinate on linear layers: ‖W⁻¹gᵢ‖² = (δᵢ²)ᵀ V (aᵢ²) with V = 1/w², one matmul a layer
        self._quadratic = book_keeping and not self._ghost and all(isinstance(m, nn.Linear) for m in base.layers)
        self._position = {id(p): i for i, p in enumerate(self.params)}

    def clipped_sum(self, x: Tensor, y: Tensor, clip_norm: float) -> ClippedSum:
        if not 0.0 < clip_norm < math.inf:
            raise ValueError(f"the clipping threshold must be positive and finite, got {clip_norm!r}")
        if len(x) == 0:
            return zero_sum(self.params, x)
        if not self.params or (self._ghost and not self.base.layers):
            with torch.no_grad():
                return zero_sum(self.params, x, F.cross_entropy(self.model(x), y, reduction="sum"))
        dtype = self.params[0].dtype
        if self._ghost:
            return self._layer_ghost(x, y, float(clip_norm), self.weights.group_weights.to(dtype))
        if self._quadratic:
            return self._coordinate_linear(x, y, float(clip_norm), self.weights.per_param(dtype))
        return self._materialized(x, y, float(clip_norm), self.weights.per_param(dtype))

    def _layer_ghost(self, x: Tensor, y: Tensor, clip_norm: float, layer_weights: Tensor) -> ClippedSum:
        """Per-layer ghost norms of the book-keeping clipper, each layer's squared norm divided by w_k²."""
        base: BookKeepingClipper = self.base  # type: ignore[assignment]
        losses, inputs, deltas, correct = base.deltas(x, y)
        inverse_square = layer_weights.square().reciprocal()  # exactly 1 where w = 1
        sq_norms, finishers = base.layer_norms(inputs, deltas)
        total = None
        for k, sq in enumerate(sq_norms):
            weighted = sq * inverse_square[k]
            total = weighted if total is None else total + weighted
        norms = total.sqrt()
        factors = clip_factors(norms, clip_norm)
        grads = base.in_model_order([g for finish in finishers for g in finish(factors)])
        base.release_workspace()
        return ClippedSum(grads=grads, norms=norms, loss_sum=losses.sum(), clipped=norms > clip_norm, correct=correct)

    def _coordinate_linear(self, x: Tensor, y: Tensor, clip_norm: float, weights: list[Tensor]) -> ClippedSum:
        """Per-coordinate weights on a model of linear layers, without per-example gradients: layer k's
        gᵢ = δᵢaᵢᵀ (and δᵢ for the bias), so ‖W⁻¹gᵢ‖² = Σ_{c,d} δᵢc² aᵢd² / w_cd² = ((δᵢ²)ᵀV)·aᵢ² with
        V = 1/w² (plus (δᵢ²)ᵀ/w_b² for the bias): one (B × out)·(out × in) matmul of non-negative terms."""
        base: BookKeepingClipper = self.base  # type: ignore[assignment]
        losses, inputs, deltas, correct = base.deltas(x, y)
        total, finishers = None, []
        for module, a, delta in zip(base.layers, inputs, deltas, strict=True):
            _, finish = linear_norms_and_sum(module, a, delta)
            delta_sq = delta.square()
            sq = torch.zeros(len(x), dtype=delta.dtype, device=delta.device)
            if module.weight.requires_grad:
                inverse = weights[self._position[id(module.weight)]].square().reciprocal()
                sq = sq + torch.linalg.vecdot(delta_sq @ inverse.expand_as(module.weight), a.square())
            if module.bias is not None and module.bias.requires_grad:
                inverse = weights[self._position[id(module.bias)]].square().reciprocal()
                sq = sq + delta_sq @ inverse.expand_as(module.bias)
            total = sq if total is None else total + sq
            finishers.append(finish)
        norms = total.sqrt()
        factors = clip_factors(norms, clip_norm)
        grads = base.in_model_order([g for finish in finishers for g in finish(factors)])
        return ClippedSum(grads=grads, norms=norms, loss_sum=losses.sum(), clipped=norms > clip_norm, correct=correct)

    def _materialized(self, x: Tensor, y: Tensor, clip_norm: float, weights: list[Tensor]) -> ClippedSum:
        """Per-example gradients from torch.func (as `MaterializedClipper`), weighted norms, one factor each."""
        params = {n: p.detach() for n, p in zip(self._names, self.params, strict=True)}
        buffers = dict(self.model.named_buffers())

        def example_loss(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
            out = functional_call(self.model, (p, buffers), (xi.unsqueeze(0),))
            return F.cross_entropy(out, yi.unsqueeze(0)), out.squeeze(0)

        per_example, (losses, logits) = vmap(grad_and_value(example_loss, has_aux=True), in_dims=(None, 0, 0))(
            params, x, y
        )
        batch = x.shape[0]
        sq = torch.zeros(batch, dtype=self.params[0].dtype, device=x.device)
        for n, w in zip(self._names, weights, strict=True):
            sq = sq + row_sq_norms((per_example[n] / w).reshape(batch, -1))
        norms = sq.sqrt()
        factors = clip_factors(norms, clip_norm)
        grads = [torch.einsum("b,b...->...", factors, per_example[n]) for n in self._names]
        return ClippedSum(
            grads=grads,
            norms=norms,
            loss_sum=losses.sum().detach(),
            clipped=norms > clip_norm,
            correct=count_correct(logits, y),
        )


# ------------------------------------------------------------------------------ noise and the step


def add_weighted_noise(grads: list[Tensor], weights: list[Tensor], std: float, generator: RandomSource) -> list[Tensor]:
    """Add N(0, std²·w²) to every coordinate, in place: σC·wⱼ·zⱼ. Draws as `add_gaussian_noise` does, one
    tensor at a time in the same order, so with w = 1 the draws (and sums) are DP-SGD's exactly."""
    for g, w in zip(grads, weights, strict=True):
        if w.dim() == 0:  # one weight for the tensor: a draw of std·w
            add_gaussian_noise([g], std * float(w), generator)
        else:
            noise = add_gaussian_noise([torch.zeros_like(g)], std, generator)[0]
            g.addcmul_(noise, w)
    return grads


class AnisoDPSGD:
    """The state of an anisotropic DP-SGD run: the weight rule and the clipper that reads it."""

    def __init__(
        self,
        base: BookKeepingClipper | MaterializedClipper,
        *,
        granularity: Granularity = "layer",
        smoothing: float = DEFAULT_SMOOTHING,
        max_ratio: float = DEFAULT_MAX_RATIO,
        warmup: int = WARMUP_STEPS,
    ):
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
        device = base.params[0].device if base.params else torch.device("cpu")
        layout = WeightLayout(
            granularity=granularity,
            shapes=tuple(p.shape for p in base.params),
            param_layers=_param_layers(base),
            device=device,
        )
        self.weights = ReleasedGradientWeights(layout, smoothing=smoothing, max_ratio=max_ratio, warmup=warmup)
        self.clipper = WeightedClipper(base, self.weights)

    @property
    def params(self) -> list[Tensor]:
        return self.clipper.params


def aniso_dpsgd_step(
    *,
    step: int,
    aniso: AnisoDPSGD,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    plan: TrainingPlan,
    physical_batch_size: int | None,
    sampling_generator: RandomSource,
    noise_generator: RandomSource,
) -> StepStats:
    """Step `step` (1-based) of the plan: DP-SGD's chain with weighted clipping and noise σC·W z. The
    returned grad-norm quantiles are of the weighted norms ‖W⁻¹gᵢ‖₂ (what is clipped to C)."""
    clip_norm, std = plan.clip_norm_at(step), noise_std(plan, step)
    optimizer.zero_grad(set_to_none=True)
    lot = sample_poisson_lot(len(x), plan.sampling_rate, sampling_generator, x.device)
    weights = aniso.weights.per_param(aniso.params[0].dtype) if aniso.params else []  # fixed before the lot
    clipped = clip_and_accumulate(aniso.clipper, x[lot], y[lot], clip_norm, physical_batch_size)
    noisy = add_weighted_noise(clipped.grads, weights, std, noise_generator)
    update = average(noisy, plan)
    # the release: only it and public numbers reach the weights of the next step
    aniso.weights.observe(update, noise_std=std, lot_size=plan.lot_size)
    for param, g in zip(aniso.params, update, strict=True):
        param.grad = g
    optimizer.step()
    return stats_of(clipped, int(lot.numel()))

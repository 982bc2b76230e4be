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

The weights (`ReleasedGradientWeights`, in `aniso_weights`): a running average (β = `aniso_smoothing`) of the squared
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

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from engine.training.algorithms.aniso_weights import (
    DEFAULT_MAX_RATIO,
    DEFAULT_SMOOTHING,
    GRANULARITIES,
    WARMUP_STEPS,
    Granularity,
    ReleasedGradientWeights,
    WeightLayout,
)
from engine.training.algorithms.dpsgd import average, clip_and_accumulate, noise_std, stats_of
from engine.training.algorithms.registry import Step, StepContext, StepStats, register_step
from engine.training.clipping import (
    BookKeepingClipper,
    ClippedSum,
    MaterializedClipper,
    clip_factors,
    count_correct,
    make_clipper,
    row_sq_norms,
)
from engine.training.clipping.rules import linear_norms_and_sum
from engine.training.clipping.sums import zero_sum
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.noise import RandomSource, add_gaussian_noise, sample_poisson_lot

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


@register_step(Algorithm.ANISO_DPSGD)
def aniso_steps(context: StepContext) -> Step:
    """Anisotropic DP-SGD's step; its weight rule from the spec's `aniso_*` keys (their defaults where unset)."""
    spec, streams = context.spec, context.streams
    aniso = AnisoDPSGD(
        make_clipper(context.model),
        granularity=spec.aniso_granularity or "layer",
        smoothing=DEFAULT_SMOOTHING if spec.aniso_smoothing is None else spec.aniso_smoothing,
        max_ratio=spec.aniso_max_ratio or DEFAULT_MAX_RATIO,
    )
    return lambda step: aniso_dpsgd_step(
        step=step,
        aniso=aniso,
        optimizer=context.optimizer,
        x=context.x,
        y=context.y,
        plan=context.plan,
        physical_batch_size=spec.physical_batch_size,
        sampling_generator=streams["sampling"],
        noise_generator=streams["noise"],
    )

"""Where a one-run audit's gradient canaries go (`engine.training.canaries`): the model coordinates in which the
data's own gradient is smallest, measured on public data only.

A Dirac canary (Nasr et al. 2023, "Tight auditing of differentially private machine learning") is a gradient of
norm C along one coordinate; the auditor scores it by the released noisy sums at that coordinate, where the
data's own clipped gradients add to the DP noise. Nasr et al. put their canaries in the coordinates where the
data's gradient is smallest; so does this module, measured where nothing private enters:

- the model is the **initial** one (from the run's seed: public);
- the examples are the **test split** (this project treats it as public: test accuracy is shown without any ε),
  at most `PUBLIC_EXAMPLES` of them, in the split's own order, as the model sees them (after any fixed or
  DP-released feature map);
- each example's gradient counts at unit norm, g/‖g‖ (the clipping norm C as the unit, as if every example were
  clipped, which over-counts those below C); a zero gradient counts zero.

`PublicProfile` holds, per coordinate, the mean of those unit gradients (the data's expected contribution to a
lot's clipped sum per example, in units of C) and the mean of their squares (its spread). Nothing is computed
from the training data, so the placement and the profile may be used, stored or shown freely; canary membership
(drawn from OS randomness) plays no part in them.
"""

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

PUBLIC_EXAMPLES = 4096  # test examples measured: enough to find the coordinates the data never touches
CHUNK_FLOATS = 1 << 23  # per-example gradients held at once (32 MiB of float32), whatever the model's size


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublicProfile:
    """Per trainable coordinate (the parameters flattened in order): `mean` and `energy` (mean square) of the
    public examples' unit-norm gradients at the initial model, over `examples` examples."""

    mean: np.ndarray
    energy: np.ndarray
    examples: int

    def __post_init__(self) -> None:
        if self.mean.shape != self.energy.shape or self.mean.ndim != 1:
            raise ValueError("mean and energy must be flat arrays of one length (the model's coordinates)")


def public_profile(model: nn.Module, x: Tensor, y: Tensor, *, limit: int = PUBLIC_EXAMPLES) -> PublicProfile:
    """The profile of `model` (as it is now: call it before training) on the public examples `x`, `y` (the first
    `limit`), by per-example gradients of the cross-entropy (`torch.func`), in chunks that bound memory."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = dict(model.named_buffers())
    total = sum(p.numel() for p in params.values())
    x, y = x[:limit], y[:limit]
    mean = torch.zeros(total, dtype=torch.float64)
    energy = torch.zeros(total, dtype=torch.float64)
    if len(x) == 0 or total == 0:
        return PublicProfile(mean=mean.numpy(), energy=energy.numpy(), examples=0)

    def example_loss(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> Tensor:
        return F.cross_entropy(functional_call(model, (p, buffers), (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_example = vmap(grad(example_loss), in_dims=(None, 0, 0))
    chunk = max(1, CHUNK_FLOATS // total)
    for start in range(0, len(x), chunk):
        grads = per_example(params, x[start : start + chunk], y[start : start + chunk])
        flat = torch.cat([grads[n].reshape(grads[n].shape[0], -1) for n in names], dim=1).double().cpu()
        norms = flat.norm(dim=1, keepdim=True)
        unit = torch.where(norms > 0, flat / norms.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
        mean += unit.sum(0)
        energy += unit.square().sum(0)
    return PublicProfile(mean=(mean / len(x)).numpy(), energy=(energy / len(x)).numpy(), examples=len(x))


def quietest(energy: np.ndarray, count: int, order: Tensor) -> Tensor:
    """The `count` coordinates of least `energy`, ties (the many exact zeros of pixels no example inks) broken by
    the public random permutation `order` of all coordinates: a coordinate's rank in it is its tie-breaker."""
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    chosen = np.lexsort((rank.numpy(), np.asarray(energy, dtype=float)))[:count]
    return torch.from_numpy(chosen.astype(np.int64))

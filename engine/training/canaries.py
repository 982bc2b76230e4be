"""Canaries for a one-run audit of a DP-SGD run (`spec.audit`; Steinke, Nasr & Jagielski 2023), scored after
training and turned into ε̂ by `engine.privacy.auditing`.

Each of m canaries joins the training data independently with probability ½, the draw made from OS randomness:
nothing in the run's spec or stored record regenerates it, and only the audit's counts are kept. A canary that is
in is one more example: every step samples it into the lot with the same probability q as any other, so the plan
and its ε cover it like any example; a canary that is out never touches the run.

- **gradient** (white-box, Nasr et al. 2023's Dirac canaries): canary i is a gradient ±c (the clipping threshold,
  or the smallest per-layer one; a public random sign) along one coordinate jᵢ of the model's parameters, added
  to the clipped sum of each lot it is sampled into. Its score sums, over the steps, the likelihood ratio of the
  released noisy sum at jᵢ (`GradientCanaries.observe`): what an adversary who sees every noisy sum (the release
  DP-SGD's analysis covers) looks for, with the data's slowly drifting gradient at jᵢ taken out.
- **input** (black-box): canary i is an out-of-distribution input, uniform in [0, 1]^d, with a random label, trained
  on like any example; its score is minus the final model's loss on it.

The canaries' coordinates, inputs and labels are public (from the run's seed); only their membership is secret.
"""

import math
import secrets
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.privacy.auditing import CanaryAudit, audit_scores, audit_sentence
from engine.training.config.spec import RunSpec, SpecError

if TYPE_CHECKING:  # the trainer imports this module
    from engine.training.trainer import TrainResult

LEVEL_RATE = 0.1  # the running average's weight on the newest sum: about the last 10 steps
RESIDUAL_FLOOR = 0.5  # the least spread assumed of a residual, in canary norms: the lot's own step-to-step jitter


def draw_membership(canaries: int) -> np.ndarray:
    """Which canaries are in: each independently with probability ½, from OS randomness."""
    return np.random.default_rng(secrets.randbits(128)).random(canaries) < 0.5


def public_generator(seed: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + salt)


class GradientCanaries:
    """Dirac canaries over the trainable parameters `params` (in the order the clipped sums list them)."""

    kind = "gradient"

    def __init__(self, params: list[Tensor], *, canaries: int, seed: int):
        sizes = [p.numel() for p in params]
        total = sum(sizes)
        if canaries > total:
            raise SpecError("audit", f"canaries must be at most {total:,} for this model (one coordinate each)")
        coordinates = torch.randperm(total, generator=public_generator(seed, 1))[:canaries]
        offsets = np.cumsum([0, *sizes])
        self.members = draw_membership(canaries)
        self.where: list[tuple[int, Tensor, Tensor]] = []  # (tensor k, which canaries, their flat index in it)
        for k in range(len(params)):
            here = (coordinates >= int(offsets[k])) & (coordinates < int(offsets[k + 1]))
            if here.any():
                self.where.append((k, torch.nonzero(here).squeeze(1), coordinates[here] - int(offsets[k])))
        self.signs = torch.randint(2, (canaries,), generator=public_generator(seed, 3)).double() * 2 - 1
        self.scores = np.zeros(canaries)
        self.level: np.ndarray | None = None  # a running average of each coordinate's released sums
        self.sampler = torch.Generator().manual_seed(secrets.randbits(63))  # the lots each joins: secret too
        self.inside = torch.from_numpy(self.members)

    def insert(self, grads: list[Tensor], *, rate: float, magnitude: float) -> None:
        """Add each canary that is in and sampled into this lot (probability `rate`) to the clipped sum `grads`."""
        sampled = self.inside & (torch.rand(len(self.members), generator=self.sampler) < rate)
        for k, which, index in self.where:
            chosen = sampled[which]
            if chosen.any():
                flat = grads[k].view(-1)
                spots = index[chosen].to(flat.device)
                values = (self.signs[which[chosen]] * magnitude).to(flat.device, flat.dtype)
                flat.index_add_(0, spots, values)

    def observe(self, noisy: list[Tensor], *, magnitude: float, noise_std: float, rate: float) -> None:
        """Score each canary by the log-likelihood ratio of this step's released noisy sum at its coordinate, "it
        joined this lot with probability `rate`" against "it is out", in units of its norm c: the sum's residual
        r above the coordinate's running average of earlier sums (the data's own gradient there drifts slowly)
        is N(0, s²) without the canary and N(1, s²) with it, s = σc/c at least `RESIDUAL_FLOOR` (the lot's own
        jitter); Neyman–Pearson's statistic for one step, summed over the steps."""
        released = np.zeros(len(self.members))
        for k, which, index in self.where:
            released[which.numpy()] = noisy[k].detach().view(-1)[index.to(noisy[k].device)].double().cpu().numpy()
        released *= self.signs.numpy() / magnitude
        if self.level is None:  # the first step sets the level and scores nothing
            self.level = released.copy()
            return
        residual, spread = released - self.level, max(noise_std / magnitude, RESIDUAL_FLOOR)
        self.scores += np.logaddexp(math.log1p(-rate), math.log(rate) + (residual - 0.5) / spread**2)
        self.level += LEVEL_RATE * (released - self.level)

    def audit(self, model: nn.Module, *, delta: float) -> CanaryAudit:
        """ε̂ from the scores the released sums gave (the final `model` adds nothing a white-box auditor lacks)."""
        return audit_scores(self.scores, self.members, delta=delta)


class InputCanaries:
    """Out-of-distribution inputs with random labels, the ones that are in appended to the training set."""

    kind = "input"

    def __init__(self, *, canaries: int, n_features: int, n_classes: int, seed: int, device: torch.device):
        generator = public_generator(seed, 2)
        self.inputs = torch.rand(canaries, n_features, generator=generator).to(device)
        self.labels = torch.randint(n_classes, (canaries,), generator=generator).to(device)
        self.members = draw_membership(canaries)

    def training_set(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        inside = torch.from_numpy(self.members).to(x.device)
        return torch.cat([x, self.inputs[inside].to(x.dtype)]), torch.cat([y, self.labels[inside]])

    def audit(self, model: nn.Module, *, delta: float) -> CanaryAudit:
        with torch.no_grad():
            loss = F.cross_entropy(model(self.inputs), self.labels, reduction="none")
        return audit_scores((-loss).double().cpu().numpy(), self.members, delta=delta)


Canaries = GradientCanaries | InputCanaries


def make_canaries(
    spec: RunSpec, params: list[Tensor], *, n_features: int, n_classes: int, device: torch.device
) -> Canaries | None:
    """The canaries `spec.audit` asks for (None: not an audited run)."""
    if spec.audit is None:
        return None
    count = int(spec.audit["canaries"])
    if spec.audit["kind"] == "gradient":
        return GradientCanaries(params, canaries=count, seed=spec.seed)
    return InputCanaries(canaries=count, n_features=n_features, n_classes=n_classes, seed=spec.seed, device=device)


def audited(result: "TrainResult", canaries: Canaries, model: nn.Module, *, delta: float) -> "TrainResult":
    """The run's result with its audit (the counts and ε̂ with its ceiling, never the membership), and a sentence
    saying what it shows in its privacy statement."""
    audit = canaries.audit(model, delta=delta)
    statement = f"{result.privacy_statement} {audit_sentence(audit, kind=canaries.kind)}"
    return replace(result, audit={"kind": canaries.kind, **audit.to_dict()}, privacy_statement=statement)

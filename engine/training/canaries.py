"""Canaries for a one-run audit of a DP-SGD run (`spec.audit`; Steinke, Nasr & Jagielski 2023), scored after
training and turned into ε̂ by `engine.privacy.auditing`.

Each of m canaries joins the training data independently with probability ½, the draw made from OS randomness:
nothing in the run's spec or stored record regenerates it, and only the audit's counts are kept. A canary that is
in is one more example: every step samples it into the lot with the same probability q as any other, so the plan
and its ε cover it like any example; a canary that is out never touches the run.

- **gradient** (white-box, Nasr et al. 2023's Dirac canaries): canary i is a gradient ±c (the clipping threshold,
  or the smallest per-layer one; a public random sign) along one coordinate jᵢ of the model's parameters, added
  to the clipped sum of each lot it is sampled into. The coordinates are the m where the data's own gradient is
  smallest (`engine.training.canary_placement`: unit-norm per-example gradients of the public test split at the
  public initial model; ties, such as the weights on pixels no example inks, broken by a public permutation from
  the seed). Its score sums, over the steps, the log-likelihood ratio of the released noisy sum at jᵢ
  (`GradientCanaries.observe`): what an adversary who sees every noisy sum (the release DP-SGD's analysis
  covers) looks for, with the data's expected contribution there, estimated on the same public profile, taken
  out.
- **input** (black-box): canary i is an out-of-distribution input, uniform in [0, 1]^d, with a random label, trained
  on like any example; its score is minus the final model's loss on it.

The canaries' coordinates, inputs and labels are public (from the run's seed, the initial model and the test
split); only their membership is secret.

Why ε̂ stays a valid lower bound (Steinke, Nasr & Jagielski 2023, Theorem 3.1): the theorem needs each canary's
membership to be an independent fair coin, and the guesses to be a function of the mechanism's output (here every
released noisy sum) and of anything independent of the coins. The coins come from OS randomness and are read only
by `insert` (which canaries join the clipped sum) and by the final count of right guesses. Everything the auditor
chooses comes before them or from the release: the coordinates, signs and the public profile depend only on the
seed, the initial model and the test split; the scores only on the released sums, σ, q and that profile. The
coordinates and the score function may therefore be chosen as freely as this (a poor choice costs power, never
validity), and nothing here is computed from the private training data, so nothing needs an ε of its own.
"""

import secrets
from dataclasses import replace

import numpy as np
import scipy.special
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.privacy.auditing import CanaryAudit, audit_scores, audit_sentence, sampled_shift_log_ratio
from engine.training.canary_placement import PublicProfile, public_profile, quietest
from engine.training.config.audit import canary_count_problem
from engine.training.config.spec import RunSpec, SpecError
from engine.training.run_results import TrainResult

LEVEL_RATE = 0.1  # the running level's weight on the newest release: about the last 10 steps
MIN_VARIANCE = 1e-6  # the least variance assumed of a residual, in squared canary norms: keeps scores finite


def draw_membership(canaries: int) -> np.ndarray:
    """Which canaries are in: each independently with probability ½, from OS randomness."""
    return np.random.default_rng(secrets.randbits(128)).random(canaries) < 0.5


def public_generator(seed: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + salt)


def check_canary_count(canaries: int, coordinates: int) -> None:
    """SpecError naming `audit` and the allowed range when a model has fewer trainable coordinates than the
    gradient canaries asked for (each takes one; `parse_spec` refuses such a spec already)."""
    if (problem := canary_count_problem(canaries, coordinates)) is not None:
        raise SpecError("audit", problem)


class GradientCanaries:
    """Dirac canaries over the trainable parameters `params` (in the order the clipped sums list them), placed in
    the quietest coordinates of the public `profile` (`canary_placement`) for a training set of `n_train`
    examples; without a profile (no public examples), at coordinates drawn from the seed, scored as if the data
    contributed nothing there."""

    kind = "gradient"

    def __init__(
        self, params: list[Tensor], *, canaries: int, seed: int, profile: PublicProfile | None = None, n_train: int = 0
    ):
        sizes = [p.numel() for p in params]
        total = sum(sizes)
        check_canary_count(canaries, total)
        order = torch.randperm(total, generator=public_generator(seed, 1))
        if profile is None:
            coordinates = order[:canaries]
            mean, energy = np.zeros(canaries), np.zeros(canaries)
        else:
            if len(profile.energy) != total:
                raise ValueError(f"the profile has {len(profile.energy):,} coordinates; the model {total:,}")
            coordinates = quietest(profile.energy, canaries, order)
            mean, energy = profile.mean[coordinates.numpy()], profile.energy[coordinates.numpy()]
        offsets = np.cumsum([0, *sizes])
        self.members = draw_membership(canaries)
        self.coordinates = coordinates
        self.where: list[tuple[int, Tensor, Tensor]] = []  # (tensor k, which canaries, their flat index in it)
        for k in range(len(params)):
            here = (coordinates >= int(offsets[k])) & (coordinates < int(offsets[k + 1]))
            if here.any():
                self.where.append((k, torch.nonzero(here).squeeze(1), coordinates[here] - int(offsets[k])))
        self.signs = torch.randint(2, (canaries,), generator=public_generator(seed, 3)).double() * 2 - 1
        # the public profile at the canaries' coordinates, summed over a training set's worth of examples and
        # turned to the canaries' signs: per unit of sampling rate, the data's expected sum and its variance
        self.data_mean = n_train * mean * self.signs.numpy()
        self.data_energy = n_train * energy
        self.tracked = energy > 0  # where the public data's gradient is not exactly zero, its level drifts
        self.level: np.ndarray | None = None  # the data's expected sum at each coordinate, in canary norms
        self.scores = np.zeros(canaries)
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
        joined this lot with probability `rate`" against "it is out" (`sampled_shift_log_ratio`), summed over
        the steps, every step scoring (the first, and a full batch's q = 1, included). In units of the canary's
        norm c and turned to its sign, the release less the data's level there is N(0, s²) without the canary
        and N(1, s²) with it, where s² is the noise's (σc/c)² plus the lot's own jitter q(1 − q)·N times the
        public mean square (widened by the level's own error where the level is tracked).

        The level starts at the data's expected sum, q·N times the public mean. Where the public data's
        gradient is exactly zero it stays there (the data never reaches the coordinate); elsewhere the model's
        drift moves it, and it follows a running average of the releases less the canary's expected share, q
        times its posterior of being in (the scores so far as log-odds), so that a canary in most lots (q near 1)
        is not taken for the data's level. The level and the posterior are functions of the releases and the
        public profile alone, never of the membership."""
        released = np.zeros(len(self.members))
        for k, which, index in self.where:
            released[which.numpy()] = noisy[k].detach().view(-1)[index.to(noisy[k].device)].double().cpu().numpy()
        released *= self.signs.numpy() / magnitude
        if self.level is None:
            self.level = rate * self.data_mean
        variance = (noise_std / magnitude) ** 2 + rate * (1.0 - rate) * self.data_energy
        variance = np.where(self.tracked, variance * (1.0 + LEVEL_RATE), variance)
        self.scores += sampled_shift_log_ratio(
            released - self.level, variance=np.maximum(variance, MIN_VARIANCE), rate=rate
        )
        share = rate * scipy.special.expit(self.scores)  # the canary's expected part of this release
        self.level = np.where(self.tracked, self.level + LEVEL_RATE * (released - share - self.level), self.level)

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
    spec: RunSpec, model: nn.Module, *, x_train: Tensor, public: tuple[Tensor, Tensor] | None, n_classes: int
) -> Canaries | None:
    """The canaries `spec.audit` asks for (None: not an audited run), for `model` (the initial one: call this
    before training) trained on `x_train`. Gradient canaries are placed by the model's public profile on the
    `public` examples (the test split, inputs and labels as the model sees them)."""
    params = [p for p in model.parameters() if p.requires_grad]
    n_features, n_train, device = x_train.shape[1], len(x_train), x_train.device
    if spec.audit is None:
        return None
    count = int(spec.audit["canaries"])
    if spec.audit["kind"] == "gradient":
        check_canary_count(count, sum(p.numel() for p in params))  # before the profile is measured
        profile = None if public is None else public_profile(model, *public)
        return GradientCanaries(params, canaries=count, seed=spec.seed, profile=profile, n_train=n_train)
    return InputCanaries(canaries=count, n_features=n_features, n_classes=n_classes, seed=spec.seed, device=device)


def audited(result: TrainResult, canaries: Canaries, model: nn.Module, *, delta: float) -> TrainResult:
    """The run's result with its audit (the counts and ε̂ with its ceiling, never the membership), and a sentence
    saying what it shows in its privacy statement."""
    audit = canaries.audit(model, delta=delta)
    statement = f"{result.privacy_statement} {audit_sentence(audit, kind=canaries.kind)}"
    return replace(result, audit={"kind": canaries.kind, **audit.to_dict()}, privacy_statement=statement)

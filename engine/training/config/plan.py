"""The training plan: the frozen bundle of the numbers a run trains with and the privacy ledger that
accounts for exactly those numbers, so what is trained and what is charged cannot drift apart.

One plan type serves every algorithm; `Algorithm` decides how lots are drawn and what each step
releases:

- dpsgd (Abadi et al. 2016): Poisson lots of expected size L (q = L/N); per step one sampled Gaussian
  release of the clipped gradient sum, σ·C noise.
- noisy_gd (Near & Abuah): every step uses the whole training set: one Gaussian release per step, and
  up front one Laplace release of the example count (sensitivity 1) used as the denominator.
- nonprivate: shuffled batches of L, no ledger.

DP-PCA (Abadi et al. 2016) adds one up-front Gaussian release of the covariance of L2-normalized inputs.

A dpsgd spec with `fill_budget` keeps σ = noise_multiplier and trains the most steps whose ε stays within
target_epsilon by RDP or PLD, whichever allows more (`engine.privacy.fill_steps`), at most the steps of its
`epochs`; the plan records which accountant filled them (`filled_by`, summary `steps_filled_by`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dp_accounting import NeighboringRelation

from engine.privacy import (
    Panel,
    PrivacyLedger,
    Release,
    UnreachableTargetError,
    calibrate_sigma,
    dp_pca_event,
    dpsgd_step_event,
    fill_steps,
    gaussian_event,
    laplace_event,
)
from engine.privacy.planning import sampling_rate, steps_for
from engine.privacy.restarts import charge_earlier_attempts, restart_sentence
from engine.training.config import learner_budget
from engine.training.config.keys import RANGES, Algorithm
from engine.training.config.reach import schedule_outside
from engine.training.config.schedules import CONSTANT, Schedule
from engine.training.config.spec import RunSpec, SpecError, spec_dataset_info


@dataclass(frozen=True, kw_only=True)
class TrainingPlan:
    algorithm: Algorithm
    n_train: int
    steps: int
    lot_size: int  # expected lot size L (N for full batch): a public constant, the denominator of an update
    delta: float | None = None
    noise_multiplier: float | None = None  # base σ: noise std is σ·C
    calibrated_by: str | None = None  # the accountant σ was calibrated by for a target ε; None: σ was given
    filled_by: str | None = None  # fill_budget: the accountant whose ε let the most steps fit the target
    steps_cap: int | None = None  # fill_budget: the steps of the spec's epochs, the most it may fill
    clip_norm: float | None = None  # base C
    noise_phases: tuple[tuple[float, int], ...] = ()  # (σ multiplier, number of steps), in order
    clipping: str | None = None  # flat | per_layer (dpsgd), gradient | input (noisy_gd)
    clip_schedule: Schedule = CONSTANT
    count_epsilon: float | None = None  # noisy GD: the Laplace count's ε (scale 1/ε)
    pca_dims: int | None = None
    pca_noise: float | None = None  # DP-PCA: σ_p on the covariance (sensitivity 1)
    learner_step: Release | None = None  # textbook learners: what one step releases (its count is the plan's steps)
    learner_parameters: tuple[tuple[str, float], ...] = ()  # their mechanism's parameters (η, ε_q, ...), public
    neighboring: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE
    notes: tuple[str, ...] = field(default=())
    earlier_attempts: tuple[int, ...] = ()  # steps released by each earlier attempt of a restarted run
    earlier_noise_replayed: bool = False  # those attempts drew this attempt's noise (lab mode), else fresh noise

    @property
    def private(self) -> bool:
        return self.algorithm.private

    @property
    def full_batch(self) -> bool:
        return self.algorithm is Algorithm.NOISY_GD

    @property
    def sampling_rate(self) -> float:
        return sampling_rate(lot_size=self.lot_size, n_train=self.n_train)

    @property
    def steps_per_epoch(self) -> float:
        return self.n_train / self.lot_size

    @property
    def noise_std(self) -> float | None:
        """σ·C at the first step."""
        return None if self.noise_multiplier is None else self.noise_multiplier * self.clip_norm

    def epoch_of(self, step: int) -> float:
        """Epochs completed after `step` steps (an epoch is N/L steps)."""
        return step / self.steps_per_epoch

    def noise_multiplier_at(self, step: int) -> float:
        """σ of step `step` (1-based)."""
        done = 0
        for factor, count in self.noise_phases:
            done += count
            if step <= done:
                return self.noise_multiplier * factor
        raise ValueError(f"step {step} is beyond the plan's {self.steps} steps")

    def clip_norm_at(self, step: int) -> float:
        """C of step `step` (1-based): the schedule's value at the epoch the step starts in."""
        return self.clip_norm * self.clip_schedule.factor_at(self.epoch_of(step - 1))

    def upfront(self) -> tuple[Release, ...]:
        releases = []
        if self.pca_noise is not None:
            releases.append(
                Release(
                    event=dp_pca_event(noise_multiplier=self.pca_noise),
                    label=(
                        f"DP-PCA to {self.pca_dims} dimensions (Gaussian noise σ_p = {self.pca_noise:g} on the "
                        "covariance of L2-normalized inputs)"
                    ),
                )
            )
        if self.count_epsilon is not None:
            releases.append(
                Release(
                    event=laplace_event(scale=1.0 / self.count_epsilon),
                    label=(f"noisy example count (Laplace, ε = {self.count_epsilon:g})"),
                )
            )
        return tuple(releases)

    def step_release(self, sigma: float, count: int) -> Release:
        if self.learner_step is not None:
            return replace(self.learner_step, count=count)
        if self.algorithm is Algorithm.ANISO_DPSGD:
            return Release(
                event=dpsgd_step_event(sampling_rate=self.sampling_rate, noise_multiplier=sigma),
                count=count,
                label=(
                    f"anisotropic DP-SGD step (gradients clipped to ‖W⁻¹g‖₂ ≤ {self.clip_norm:g}, noise "
                    f"N(0, σ²C²W²) with σ = {sigma:.4g}: the Gaussian mechanism at σ after the change of "
                    f"variables W⁻¹; W from earlier released gradients only; Poisson lots "
                    f"q = {self.sampling_rate:.4g})"
                ),
            )
        if self.algorithm is Algorithm.NOISY_GD:
            return Release(
                event=gaussian_event(noise_multiplier=sigma),
                count=count,
                label=(
                    f"noisy GD step (Gaussian noise σ = {sigma:.4g} on the full-batch gradient sum, "
                    f"{self._clipping_words()})"
                ),
            )
        return Release(
            event=dpsgd_step_event(sampling_rate=self.sampling_rate, noise_multiplier=sigma),
            count=count,
            label=(
                f"DP-SGD step (Gaussian noise σ = {sigma:.4g}, {self._clipping_words()}, "
                f"Poisson lots q = {self.sampling_rate:.4g})"
            ),
        )

    def _clipping_words(self) -> str:
        if self.clipping == "input":
            return f"inputs clipped to L2 norm b = {self.clip_norm:g}, so each gradient has norm ≤ b"
        if self.clipping == "per_layer":
            return f"gradients clipped per layer, thresholds whose squares sum to C² = {self.clip_norm:g}²"
        return f"gradients clipped to L2 norm {self.clip_norm:g}"

    def ledger(self, steps: int | None = None) -> PrivacyLedger | None:
        """The privacy ledger of the first `steps` steps (all of them by default); None if not private."""
        if not self.private:
            return None
        ledger = charge_earlier_attempts(
            self.attempt_ledger(), self.earlier_attempts, replayed=self.earlier_noise_replayed
        )
        return ledger if steps is None else ledger.truncated(steps)

    def attempt_ledger(self) -> PrivacyLedger | None:
        """The ledger of this attempt alone, every step (a restarted run's earlier attempts not charged)."""
        if not self.private:
            return None
        phases = tuple(self.step_release((self.noise_multiplier or 1.0) * f, n) for f, n in self.noise_phases)
        return PrivacyLedger(phases=phases, upfront=self.upfront(), neighboring=self.neighboring, notes=self.notes)

    def restart(
        self, steps_done: int, *, epsilon: float, panel_of: Callable[[PrivacyLedger, float], Panel]
    ) -> dict[str, Any] | None:
        """A restarted run's `restart` result (None for a run that did not restart): the steps its earlier attempts
        released, how their noise relates to this attempt's, this attempt's own ε after `steps_done` steps (the
        restart cost the difference from `epsilon`, the run's) and the privacy statement's line on it."""
        if not self.earlier_attempts:
            return None
        alone = panel_of(self.attempt_ledger().truncated(steps_done), self.delta).tightest()[1]
        replayed = self.earlier_noise_replayed
        return {
            "earlier_attempts": list(self.earlier_attempts),
            "earlier_noise": "replayed" if replayed else "fresh",
            "epsilon_this_attempt": float(alone),
            "sentence": restart_sentence(
                self.earlier_attempts, replayed=replayed, epsilon=epsilon, epsilon_alone=alone
            ),
        }

    def summary(self) -> dict[str, Any]:
        """The public numbers of the plan, as stored beside the run."""
        out = dict(self.learner_parameters) | {
            "algorithm": self.algorithm.value,
            "n_train": self.n_train,
            "steps": self.steps,
            "expected_lot_size": self.lot_size,
            "sampling_rate": self.sampling_rate,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "clip_norm": self.clip_norm,
            "noise_std": self.noise_std,
            "count_epsilon": self.count_epsilon,
            "pca_dims": self.pca_dims,
            "pca_noise": self.pca_noise,
            "calibrated_by": self.calibrated_by,
            "steps_filled_by": self.filled_by,
            "filled_epochs": None if self.filled_by is None else self.epoch_of(self.steps),
            "steps_cap": self.steps_cap,
        }
        if len(self.noise_phases) > 1:
            out["noise_phases"] = [list(p) for p in self.noise_phases]
        if self.earlier_attempts:
            out["earlier_attempts"] = list(self.earlier_attempts)
            out["earlier_noise"] = "replayed" if self.earlier_noise_replayed else "fresh"
        return {k: v for k, v in out.items() if v is not None}


def plan_run(spec: RunSpec, *, n_train: int, sigma_hint: float | None = None) -> TrainingPlan:
    """The plan of a spec; with a target ε, σ is the smallest meeting it by the spec's calibration accountant
    (RDP by default, or PLD, which spends the target) for the whole ledger (up-front releases included), among the
    σ whose noise schedule keeps σ × multiplier in σ's range at every step (a σ raised to that floor spends less).
    `sigma_hint`, a σ planned earlier for this spec, saves the search when the accountant confirms it
    (see `calibrate_sigma`)."""
    algorithm = Algorithm(spec.algorithm)
    if algorithm.learner:
        return learner_plan(spec, n_train=n_train)
    lot_size = n_train if algorithm is Algorithm.NOISY_GD else spec.lot_size
    steps = steps_for(epochs=spec.epochs, n_train=n_train, lot_size=lot_size)
    if not algorithm.private:
        return TrainingPlan(
            algorithm=algorithm, n_train=n_train, steps=steps, lot_size=lot_size, pca_dims=spec.pca_dims
        )
    base = TrainingPlan(
        algorithm=algorithm,
        n_train=n_train,
        steps=steps,
        lot_size=lot_size,
        delta=spec.delta,
        noise_multiplier=spec.noise_multiplier or 1.0,
        clip_norm=spec.clip_norm,
        noise_phases=spec.noise_schedule.phases(steps, lambda t: (t - 1) * lot_size / n_train),
        clipping=spec.clipping,
        clip_schedule=spec.clip_schedule,
        count_epsilon=spec.count_epsilon,
        pca_dims=spec.pca_dims,
        pca_noise=spec.pca_noise,
    )
    if spec.fill_budget:
        return filled_plan(base, target_epsilon=spec.target_epsilon, schedule=spec.noise_schedule)
    if spec.noise_multiplier is not None:
        return base
    by = spec.calibration_accountant or "rdp"
    allowed = RANGES["noise_multiplier"]
    last = spec.noise_schedule.factor_at((steps - 1) * lot_size / n_train)  # the multiplier is monotone in the step
    floor, ceiling = allowed.low / min(1.0, last), allowed.high / max(1.0, last)  # σ whose schedule stays in range

    def fitted(sigma: float) -> float:
        return min(max(sigma, floor), ceiling)

    sigma = fitted(
        calibrate_sigma(
            lambda s: _with_sigma(base, fitted(s)).ledger(),
            target_epsilon=spec.target_epsilon,
            delta=spec.delta,
            hint=sigma_hint,
            accountant_name=by,
        )
    )
    problem = schedule_outside(
        "noise_schedule",
        spec.noise_schedule,
        base=sigma,
        allowed=allowed,
        steps=steps,
        lot_size=lot_size,
        n_train=n_train,
    )
    if problem is not None:  # parse_spec refuses multipliers spanning more than σ's range: a safety net
        calibrated = f"σ calibrated by {by} for target_epsilon {spec.target_epsilon:g}"
        raise SpecError("noise_schedule", f"{problem} ({calibrated})")
    return replace(_with_sigma(base, sigma), calibrated_by=by)


def filled_plan(base: TrainingPlan, *, target_epsilon: float, schedule: Schedule) -> TrainingPlan:
    """`base` (σ given, its steps the cap) cut to the most steps whose ε(δ) by RDP or PLD is within the target."""
    try:
        steps, by = fill_steps(base.ledger, target_epsilon=target_epsilon, delta=base.delta, limit=base.steps)
    except UnreachableTargetError:
        raise UnreachableTargetError(
            f"target_epsilon={target_epsilon:g} is unreachable with fill_budget: one step at noise_multiplier="
            f"{base.noise_multiplier:g} already costs more by RDP and PLD; raise target_epsilon or noise_multiplier"
        ) from None
    phases = schedule.phases(steps, lambda t: (t - 1) * base.lot_size / base.n_train)
    return replace(base, steps=steps, noise_phases=phases, filled_by=by, steps_cap=base.steps)


def budget_fill_text(summary: dict[str, Any]) -> str | None:
    """How a stored plan's steps were chosen, for a page or the command line ("epochs filled from the budget:
    73.4 (PLD)"); None unless they were filled from a budget."""
    if summary.get("steps_filled_by") is None:
        return None
    text = f"epochs filled from the budget: {summary['filled_epochs']:.1f} ({summary['steps_filled_by'].upper()})"
    capped = summary.get("steps_cap") is not None and summary["steps"] >= summary["steps_cap"]
    return f"{text}, capped by the spec's epochs" if capped else text


def learner_plan(spec: RunSpec, *, n_train: int) -> TrainingPlan:
    """A textbook learner's plan: its steps, what each releases, and its mechanism's parameters (see `budget`)."""
    algorithm, epsilon, delta = Algorithm(spec.algorithm), spec.target_epsilon, spec.delta
    common = dict(algorithm=algorithm, n_train=n_train, delta=delta)
    if algorithm is Algorithm.EXPMECH_STUMPS:
        return TrainingPlan(
            **common,
            steps=1,
            lot_size=n_train,
            noise_phases=((1.0, 1),),
            learner_parameters=(("expmech_epsilon", epsilon),),
            learner_step=Release(
                event=learner_budget.expmech_event(epsilon),
                label=(
                    f"exponential mechanism over {spec.thresholds}-threshold decision stumps, ε = "
                    f"{epsilon:g} (score: −training errors, sensitivity 1)"
                ),
            ),
        )
    if algorithm is Algorithm.SQ_LAPLACE:
        iterations, queries = int(spec.epochs), spec_dataset_info(spec).n_features + 1  # a weight per feature, a bias
        per_query = learner_budget.sq_query_epsilon(
            target_epsilon=epsilon, iterations=iterations, queries_per_iteration=queries
        )
        return TrainingPlan(
            **common,
            steps=iterations,
            lot_size=n_train,
            noise_phases=((1.0, iterations),),
            learner_parameters=(
                ("query_epsilon", per_query),
                ("laplace_scale", 1.0 / per_query),
                ("queries_per_iteration", queries),
            ),
            learner_step=Release(
                event=learner_budget.sq_step_event(query_epsilon=per_query, queries_per_iteration=queries),
                label=(
                    f"SQ iteration: {queries} statistical queries Σφ, φ ∈ [0, 1], each with Laplace "
                    f"noise of scale {1.0 / per_query:.4g} (ε_q = {per_query:.3g})"
                ),
            ),
        )
    rounds = spec.rounds
    eta = learner_budget.rwm_eta(target_epsilon=epsilon, rounds=rounds, delta=delta)
    return TrainingPlan(
        **common,
        steps=rounds,
        lot_size=1,
        noise_phases=((1.0, rounds),),
        learner_parameters=(("eta", eta),),
        neighboring=NeighboringRelation.REPLACE_ONE,
        learner_step=Release(
            event=learner_budget.rwm_round_event(eta),
            label=(
                f"randomized weighted majority round (exponential mechanism over cumulative losses, "
                f"η = {eta:.4g}: 2η-DP)"
            ),
        ),
    )


def plan_spec(spec: RunSpec, *, sigma_hint: float | None = None) -> TrainingPlan:
    """The plan of a spec on its dataset's public size (no data is read)."""
    return plan_run(spec, n_train=spec_dataset_info(spec).n_train, sigma_hint=sigma_hint)


def _with_sigma(plan: TrainingPlan, sigma: float) -> TrainingPlan:
    return replace(plan, noise_multiplier=sigma)

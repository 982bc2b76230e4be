"""The Plan page's services: what a DP-SGD schedule costs in privacy, before anything trains."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from engine.privacy import (
    ACCOUNTANTS,
    UNBOUNDED_EPSILON,
    Panel,
    PrivacyError,
    PrivacyLedger,
    calibrate_noise_multiplier,
    dpsgd_step_event,
    epsilon_text,
    panel,
    privacy_statement,
    rdp_curve,
    single_phase,
)
from engine.privacy.planning import MAX_PLAN_STEPS, MAX_TRAINING_STEPS, sampling_rate
from engine.training import DATASETS, steps_for

PLOT_POINTS = 200  # RDP and the composition theorems: microseconds a point once the per-step profile is known
PLD_LINEAR_POINTS, PLD_GEOMETRIC_POINTS = 8, 5  # PLD costs ~0.1–0.5 s a point: a coarse grid, denser early
EPSILON_WARNING = 10.0  # a larger ε is a weak guarantee: the Plan page says so


def builtin_dataset_sizes() -> dict[str, tuple[str, int]]:
    """Each built-in dataset's title and training-set size N (public facts, nothing is loaded)."""
    return {name: (info.title, info.n_train) for name, info in DATASETS.items()}


@dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """A Poisson DP-SGD schedule as the Plan page asks for it."""

    dataset_size: int
    epochs: int
    delta: float
    lot_size: int | None = None  # expected lot size L (q = L/N), or
    sampling_rate: float | None = None  # q itself
    target_epsilon: float | None = None  # σ is calibrated to meet this, or
    noise_multiplier: float | None = None  # σ is given


@dataclass(frozen=True, kw_only=True)
class PrivacyPlan:
    """What a schedule implies (σ by RDP, T, q, ε by RDP), or the error that stops it from running."""

    settings: PlanSettings
    error: str | None = None
    sampling_rate: float = 0.0
    steps: int = 0
    noise_multiplier: float = 0.0
    rdp_epsilon: float = 0.0
    best_order: float = 0.0
    order_at_edge: bool = False

    @property
    def calibrated(self) -> bool:
        return self.settings.target_epsilon is not None

    @property
    def expected_lot_size(self) -> float:
        return self.sampling_rate * self.settings.dataset_size

    def ledger(self) -> PrivacyLedger:
        event = dpsgd_step_event(sampling_rate=self.sampling_rate, noise_multiplier=self.noise_multiplier)
        return single_phase(event, self.steps)


def _schedule(settings: PlanSettings) -> tuple[float, int]:
    """(q, T) of the settings, or PrivacyError saying which input is out of range."""
    n = settings.dataset_size
    if int(n) != n or n < 1:
        raise PrivacyError(f"dataset size N must be a whole number ≥ 1, got {n}")
    if not settings.epochs > 0:
        raise PrivacyError(f"epochs must be > 0, got {settings.epochs}")
    if settings.lot_size is not None:
        if not 1 <= settings.lot_size <= n:
            raise PrivacyError(f"lot size L = {settings.lot_size:,} must lie in [1, N = {n:,}] (q = L/N ≤ 1)")
        q = sampling_rate(lot_size=settings.lot_size, n_train=n)
        steps = steps_for(epochs=settings.epochs, n_train=n, lot_size=settings.lot_size)
    else:
        q = settings.sampling_rate
        if q is None or not 0 < q <= 1:
            raise PrivacyError(f"sampling rate q must lie in (0, 1], got {q}")
        steps = steps_for(epochs=settings.epochs, n_train=n, lot_size=q * n)
    if steps > MAX_PLAN_STEPS:
        raise PrivacyError(
            f"T = {steps:,} steps: this page plans at most {MAX_PLAN_STEPS:,} (raise L or q, or train fewer epochs)"
        )
    return q, steps


@st.cache_data(show_spinner="Calibrating σ…", max_entries=256)
def rdp_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float, steps: int) -> float:
    return calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps
    )


def privacy_plan(settings: PlanSettings) -> PrivacyPlan:
    """σ calibrated by RDP (what the Train page does) or as given, T, q and the final ε by RDP: fast."""
    try:
        if not 0 < settings.delta < 1:
            raise PrivacyError(f"δ must lie strictly between 0 and 1, got {settings.delta:g}")
        q, steps = _schedule(settings)
        if settings.target_epsilon is not None:
            sigma = rdp_noise_multiplier(settings.target_epsilon, settings.delta, q, steps)
        else:
            sigma = float(settings.noise_multiplier or 0.0)
        plan = PrivacyPlan(settings=settings, sampling_rate=q, steps=steps, noise_multiplier=sigma)
        rdp = rdp_curve(plan.ledger(), delta=settings.delta, steps=[steps])
    except PrivacyError as exc:
        return PrivacyPlan(settings=settings, error=str(exc))
    return PrivacyPlan(
        settings=settings,
        sampling_rate=q,
        steps=steps,
        noise_multiplier=sigma,
        rdp_epsilon=rdp.final_epsilon,
        best_order=rdp.final_order,
        order_at_edge=rdp.order_at_edge,
    )


def plot_steps(total_steps: int, points: int = PLOT_POINTS) -> np.ndarray:
    """Up to `points` evenly spaced step counts from 1 to T, ending at T."""
    return np.unique(np.linspace(1, total_steps, min(points, total_steps)).round().astype(np.int64))


def pld_steps(total_steps: int) -> np.ndarray:
    """A coarse grid for PLD: evenly spaced points plus geometric ones early, where ε grows fastest; ends at T."""
    if total_steps <= PLD_LINEAR_POINTS + PLD_GEOMETRIC_POINTS:
        return np.arange(1, total_steps + 1, dtype=np.int64)
    grid = np.concatenate(
        [np.linspace(1, total_steps, PLD_LINEAR_POINTS), np.geomspace(1, total_steps, PLD_GEOMETRIC_POINTS)]
    )
    return np.unique(grid.round().astype(np.int64))


@st.cache_data(show_spinner="Computing PLD and the composition bounds (a few seconds, then cached)…", max_entries=128)
def accountant_panel(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> Panel:
    """Every accountant's ε after 1..T Poisson DP-SGD steps: PLD on a coarse grid, the others on a fine one.
    Each curve ends at T, so `final()` is every accountant's ε for the whole run."""
    ledger = single_phase(dpsgd_step_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier), steps)
    curves, missing = {}, {}
    for name in ACCOUNTANTS:
        grid = plot_steps(steps) if ACCOUNTANTS[name].live else pld_steps(steps)  # a slow one: the coarse grid
        part = panel(ledger, delta=delta, names=(name,), steps=grid)
        curves |= part.curves
        missing |= part.not_applicable
    return Panel(delta=delta, curves=curves, not_applicable=missing)


def plan_panel(plan: PrivacyPlan) -> Panel:
    return accountant_panel(plan.sampling_rate, plan.noise_multiplier, plan.steps, plan.settings.delta)


@st.cache_data(show_spinner="Calibrating σ by PLD (a few seconds)…", max_entries=128)
def pld_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float, steps: int) -> float:
    return calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps, accountant_name="pld"
    )


def plan_pld_sigma(plan: PrivacyPlan) -> float | str:
    """σ calibrated by the tighter PLD accountant for the plan's target ε, or why there is none."""
    try:
        return pld_noise_multiplier(plan.settings.target_epsilon, plan.settings.delta, plan.sampling_rate, plan.steps)
    except PrivacyError as exc:
        return str(exc)


def _statement_lot_size(plan: PrivacyPlan) -> int | float:
    """L as the statement prints it: q = L/N must come out as the q that runs (6 significant digits)."""
    if plan.settings.lot_size is not None:
        return plan.settings.lot_size
    lot = float(f"{plan.expected_lot_size:.6g}")
    return int(lot) if lot.is_integer() else lot


def plan_statement(plan: PrivacyPlan, accounts: Panel) -> tuple[str, ...]:
    """The privacy statement a run with these settings would carry."""
    return privacy_statement(
        ledger=plan.ledger(),
        panel=accounts,
        dataset_size=plan.settings.dataset_size,
        lot_size=_statement_lot_size(plan),
    ).lines


def plan_warnings(plan: PrivacyPlan, accounts: Panel) -> list[str]:
    """What makes this plan's guarantee weak or its numbers loose."""
    n, delta = plan.settings.dataset_size, plan.settings.delta
    name, epsilon = accounts.tightest()
    warnings = []
    if delta >= 1 / n:
        warnings.append(
            f"δ = {delta:.3g} ≥ 1/N = {1 / n:.3g}: a mechanism that publishes one random record in full meets this "
            f"δ. Choose δ well below 1/N, e.g. 1/(10N) = {1 / (10 * n):.2g} or smaller."
        )
    if epsilon > EPSILON_WARNING:
        warnings.append(
            f"ε = {epsilon_text(epsilon)} (by {ACCOUNTANTS[name].label}) is above {EPSILON_WARNING:g}: the guarantee "
            "is weak (e^ε bounds how much more likely any outcome becomes). Raise σ or train fewer epochs."
        )
    if plan.steps > MAX_TRAINING_STEPS:
        warnings.append(
            f"T = {plan.steps:,} steps is more than the {MAX_TRAINING_STEPS:,} a training run may take here: raise "
            "the lot size or train fewer epochs to run this plan."
        )
    if plan.order_at_edge:
        warnings.append(
            f"The best RDP order (α = {plan.best_order:g}) is at the edge of the orders searched: the RDP value may "
            "be loose. It is still a valid upper bound, and PLD does not depend on orders."
        )
    return warnings


def plan_epsilon_frame(plan: PrivacyPlan, accounts: Panel) -> pd.DataFrame:
    """One row per accountant and step count: accountant, steps, epochs, ε."""
    frames = [
        pd.DataFrame(
            {
                "accountant": name,
                "steps": curve.steps,
                "epochs": curve.steps * plan.sampling_rate,
                "epsilon": _unbounded_as_inf(curve.epsilons),
            }
        )
        for name, curve in accounts.curves.items()
    ]
    return pd.concat(frames, ignore_index=True)


def _unbounded_as_inf(epsilons: np.ndarray) -> np.ndarray:
    """∞ for the bounds that overflowed to the largest float (a composition theorem with no finite answer)."""
    return np.where(np.asarray(epsilons) >= UNBOUNDED_EPSILON, np.inf, epsilons)


def plan_accountant_table(accounts: Panel) -> pd.DataFrame:
    """Every applicable accountant's ε for the whole run, tightest first."""
    tightest, _ = accounts.tightest()
    return pd.DataFrame(
        [
            {
                "accountant": ACCOUNTANTS[name].title,
                "ε": float(_unbounded_as_inf(eps)),
                "reported": "✓ tightest" if name == tightest else "",
                "reference": ACCOUNTANTS[name].citation,
            }
            for name, eps in sorted(accounts.final().items(), key=lambda item: item[1])
        ]
    )


def plan_not_applicable(accounts: Panel) -> list[str]:
    """The accountants with no valid answer for this mechanism, each with the reason."""
    return [f"{ACCOUNTANTS[name].title}: {reason}" for name, reason in accounts.not_applicable.items()]

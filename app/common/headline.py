"""A run's headline numbers (test accuracy, ε spent, σ or the learner's rate, q or the steps taken), worked out once
for the run panel (`st.metric`) and for the run's report, so both show the same values. Pure functions."""

from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.common.safe_text import literal
from cache import RunRecord
from engine.privacy import ACCOUNTANTS, epsilon_text
from engine.training.config.keys import CALIBRATION_ACCOUNTANTS, LEARNER_MODELS


@dataclass(frozen=True, kw_only=True)
class HeadlineNumber:
    """One headline number: its label (Markdown), its value as shown, an optional note under it (the accountant
    that calibrated σ) and its tooltip."""

    label: str
    value: str
    note: str | None = None
    help: str | None = None


def number_or_none(value: Any) -> float | int | None:
    """A number as it is (bool, text and the rest: None), for a field a record may hold in any type."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def number_text(value: Any, spec: str = "g") -> str:
    """A number formatted by `spec`; '?' for a value that is not a number."""
    number = number_or_none(value)
    return "?" if number is None else format(number, spec)


def shown(value: Any, spec: str) -> str:
    """A headline number formatted by `spec`; '–' when there is none (or it is not a number)."""
    number = number_or_none(value)
    return "–" if number is None else format(number, spec)


def last_value(frame: pd.DataFrame, column: str) -> float | None:
    """The latest recorded value of a metric (evaluations do not happen at every step)."""
    values = frame[column].dropna() if column in frame else ()
    return float(values.iloc[-1]) if len(values) else None


def is_private(spec: dict) -> bool:
    """A private run: its spec has a δ (a non-private baseline has none)."""
    return bool(number_or_none(spec.get("delta")))


def epsilon_source(result: dict) -> str:
    """The accountant the reported ε is by, as Markdown (`safe_text.unescape` gives its plain text)."""
    accountant = result.get("accountant")
    if isinstance(accountant, str) and accountant in ACCOUNTANTS:
        return ACCOUNTANTS[accountant].label
    return literal(accountant) if accountant else "RDP, live"  # still training, or an accountant of another engine


def headline_numbers(run: RunRecord, frame: pd.DataFrame) -> list[HeadlineNumber]:
    """The run's headline numbers, at most four, in the order the run panel shows them."""
    result = run.result if isinstance(run.result, dict) else {}
    plan = run.plan if isinstance(run.plan, dict) else {}
    accuracy = result.get("test_accuracy", last_value(frame, "test_accuracy"))
    epsilon = result.get("epsilon", last_value(frame, "epsilon"))
    numbers = [HeadlineNumber(label="Test accuracy", value=shown(accuracy, ".3f"))]
    if not is_private(run.spec):  # a non-private baseline
        no_bound = "A non-private baseline: no clipping, no noise, no privacy guarantee."
        return [*numbers, HeadlineNumber(label="ε spent", value="∞", help=no_bound)]
    numbers.append(
        HeadlineNumber(
            label=f"ε spent ({epsilon_source(result)})",
            value="–" if number_or_none(epsilon) is None else epsilon_text(epsilon, ".3f"),
            help=f"ε at δ={number_text(run.spec.get('delta'))} for the steps taken so far: while training, by the "
            "RDP accountant (every step); when done, the tightest valid bound of all accountants. Every value shown "
            "is an upper bound.",
        )
    )
    if plan.get("eta") is not None:
        numbers.append(
            HeadlineNumber(
                label="Learning rate η",
                value=shown(plan["eta"], ".4g"),
                help="η = ε/√(32 T ln(1/δ)): each round is 2η-DP.",
            )
        )
    elif plan.get("query_epsilon") is not None:
        numbers.append(
            HeadlineNumber(
                label="ε per query", value=shown(plan["query_epsilon"], ".3g"), help="Laplace scale 1/ε_q on each Σφ."
            )
        )
    else:
        by = plan.get("calibrated_by")
        calibrated = by in CALIBRATION_ACCOUNTANTS
        numbers.append(
            HeadlineNumber(
                label="Noise multiplier σ",
                value=shown(plan.get("noise_multiplier") or None, ".3f"),
                note=f"by {by.upper()}" if calibrated else None,
                help="Calibrated to meet the target ε by the accountant named below it." if calibrated else "As set.",
            )
        )
    algorithm = run.spec.get("algorithm")
    if isinstance(algorithm, str) and algorithm in LEARNER_MODELS:  # no lots: the steps (rounds, iterations) taken
        numbers.append(
            HeadlineNumber(
                label="Steps taken",
                value=f"{run.progress_step:,}",
                help="Rounds (RWM), iterations (SQ) or draws (exp. mech.).",
            )
        )
    else:
        numbers.append(
            HeadlineNumber(
                label="Sampling rate q",
                value=shown(plan.get("sampling_rate") or None, ".4f"),
                help="Each example joins each lot independently with probability q = L/N (Poisson sampling; 1 for "
                "full-batch noisy gradient descent).",
            )
        )
    return numbers

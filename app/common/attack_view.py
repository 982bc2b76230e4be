"""The run panel's view of what a finished private run's ε means for an attacker: the curve of the highest
true-positive rate any membership-inference attack can reach at each false-positive rate, read at 1% false
positives, with the audit's lower bound when the run was audited (`engine.privacy.tradeoff`)."""

from collections.abc import Mapping
from typing import Any

import streamlit as st

from app.common.charts.base import run_color
from app.common.charts.tradeoff import attack_figure
from app.services.tradeoff import run_attack_bound
from cache import RunRecord
from engine.privacy.tradeoff import attack_sentence

HOW_TO_READ = (
    "An attacker who holds the model and wants to tell whether one example was in the training data wrongly "
    "accuses some non-members (false positives, x) to catch some members (true positives, y). Whatever the attack, "
    "this run's guarantee keeps it on or under the curve (Dong, Roth & Su 2019; Kairouz, Oh & Viswanath 2015), "
    "for every δ(ε) of the run's privacy profile at once; the diagonal is guessing at random."
)


def audit_line(audit: Mapping[str, Any]) -> str:
    return (
        f"Dashed: the audit's ε̂ = {float(audit['epsilon']):.3f} at δ = {float(audit['delta']):.3g}, drawn as the curve "
        f"of (ε̂, δ)-DP (the audit stores its count of right guesses, not a false- and true-positive pair): with "
        f"{float(audit['confidence']):.0%} confidence the best attack on this run rises above it somewhere."
    )


def attack_view(run: RunRecord, audit: Mapping[str, Any] | None) -> None:
    """The curve and how to read it, for a run with a private result (nothing otherwise)."""
    bound, computed_now = run_attack_bound(run)
    if bound is None:
        return
    chart, words = st.columns([3, 2], vertical_alignment="center")
    chart.plotly_chart(attack_figure(bound, color=run_color(run.id), audit=audit), key=f"attack-{run.id}")
    words.markdown(f"**{attack_sentence(bound)}**")
    words.caption(HOW_TO_READ)
    if audit is not None:
        words.caption(audit_line(audit))
    if computed_now:
        words.caption(
            "Computed now from the run's stored configuration: its record, made before runs kept this curve, "
            "does not hold it."
        )

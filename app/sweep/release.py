"""What releasing the best run of a sweep costs: before launch (the plan, with the stacks it would train in and the
cost of training every point separately) and for a sweep in the store (its best run so far, and the ε that covers
releasing it: the composition of every run of a fixed grid, each stack by its members' joint ledger, or the smaller
of the private search's bound and the composition of the trials it drew, when every trial ran)."""

import json
import math
from typing import Any

import streamlit as st

from app import services
from app.common.labels import run_name
from app.common.report import SweepHeadline
from app.common.results import finite_accuracy, finite_epsilon
from app.common.safe_text import literal
from cache import RunRecord, RunStatus, SweepRecord
from engine.jobs.search import SweepPrivacy
from engine.privacy import epsilon_text

PRIVACY_NEUTRAL = ("name", "on_worker_lost")  # grid spec keys that change no ε (`vectorize` does: stacks share lots)


def grid_json(raw: Any) -> str:
    """A grid spec (or a list of specs) as the key of what releasing its best run costs."""
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k not in PRIVACY_NEUTRAL}
    return json.dumps(raw, sort_keys=True, default=str)


def planned_cost(raw_grid: dict[str, Any] | None, slot, problem: str | None) -> None:
    """The cost of releasing the best run of the sweep designed above, before anything trains, in `slot` (nothing
    while the design has a `problem`)."""
    if raw_grid is None or problem:
        return
    with slot.container():
        found = services.release_privacy(grid_json(raw_grid))
        if isinstance(found, str):
            st.warning(f"What releasing the best run would cost cannot be said: {literal(found)}")
            return
        st.info(f"**Releasing the best run.** {found.sentence()}", icon=":material/lock:")
        if found.stacks and not found.searching:
            st.caption(
                f"Cheaper selection: untick *Train compatible points together* to train every point separately "
                f"(ε = {epsilon_text(found.separate_epsilon)} instead of {epsilon_text(found.composition_epsilon)} "
                "for releasing the best run; training takes longer)."
            )


def best_run(runs: list[RunRecord]) -> RunRecord | None:
    """The finished run with the highest final test accuracy (the score a search selects by)."""
    scored = [run for run in runs if run.status is RunStatus.FINISHED and finite_accuracy(run) is not None]
    return max(scored, key=finite_accuracy, default=None)


def release_caveat(sweep: SweepRecord, runs: list[RunRecord]) -> str | None:
    """Why the search's bound does not (yet) cover its best run: trials still to run, or trials cancelled."""
    if "search" not in sweep.spec:
        return None
    if active := sum(run.status.active for run in runs):
        return f"{active} trial(s) still to end: the bound covers the best of the search once every trial has ended."
    if cancelled := sum(run.status is RunStatus.CANCELLED for run in runs):
        return (
            f"{cancelled} trial(s) were cancelled: the private-search bound assumes every drawn trial ran, so it does "
            "not cover this search's best; releasing it costs the composition of every trial (below)."
        )
    return None


def headline(sweep: SweepRecord, runs: list[RunRecord], slot) -> None:
    """The sweep's headline in `slot`: its best run so far and the ε of releasing it."""
    with slot.container():
        found = services.release_privacy(grid_json(sweep.spec), services.runs_json(runs))
        if isinstance(found, str):
            st.warning(f"What releasing this sweep's best run costs cannot be said: {literal(found)}")
            return
        best = best_run(runs)
        left, right = st.columns(2)
        epsilon, delta = release_epsilon(sweep, runs, found)
        left.metric(
            "ε of releasing the best run",
            epsilon_text(epsilon),
            help=f"At δ = {delta:.3g}: covers the best run's model and score; every other run stays in the lab.",
        )
        right.metric("Best run (test accuracy)", f"{best.result['test_accuracy']:.2%}" if best else "—")
        if caveat := release_caveat(sweep, runs):
            st.warning(caveat)
        best_text = (
            f"Best run so far: {literal(run_name(best))} (`{best.id}`). " if best else "No run has finished yet. "
        )
        st.caption(best_text + found.sentence())


def report_headline(sweep: SweepRecord, runs: list[RunRecord]) -> SweepHeadline:
    """The sweep report's headline: the best run so far (by name), the ε and δ of releasing it, the private
    search's own bound when the sweep is one, and the sentence the page shows."""
    best = best_run(runs)
    named = (
        {
            "best_name": run_name(best),
            "best_id": best.id,
            "best_accuracy": finite_accuracy(best),
            "best_epsilon": finite_epsilon(best),
        }
        if best
        else {}
    )
    found = services.release_privacy(grid_json(sweep.spec), services.runs_json(runs))
    if isinstance(found, str):
        return SweepHeadline(**named, problem=found)
    epsilon, delta = release_epsilon(sweep, runs, found)
    search = {"search_epsilon": found.search.epsilon, "search_delta": found.search.delta} if found.searching else {}
    return SweepHeadline(
        **named,
        **search,
        epsilon=epsilon,
        delta=delta,
        sentence=found.sentence(),
        caveat=release_caveat(sweep, runs),
    )


def release_epsilon(sweep: SweepRecord, runs: list[RunRecord], found: SweepPrivacy) -> tuple[float, float]:
    """(ε, δ) covering the release of this sweep's best run: the search's bound, or the composition of every trial
    when some were cancelled; a fixed grid's composition of every run."""
    if found.searching and any(run.status is RunStatus.CANCELLED for run in runs):
        composed = services.trials_composition(services.runs_json(runs))
        return (math.inf, found.delta) if isinstance(composed, str) else (composed[1], composed[2])
    return found.headline_epsilon, found.headline_delta

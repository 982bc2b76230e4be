"""Sweeps (Sweep page) and deleting stored runs (Compare page)."""

import json
from dataclasses import dataclass

import streamlit as st

from app.services.store import get_store
from cache import RunRecord, StoreError, SweepRecord
from cache.store.maintenance import check_deletable, delete_runs
from engine import ENGINE_VERSION
from engine.jobs import search
from engine.jobs.release import ReleaseEpsilon, RunToRelease, release_epsilon
from engine.jobs.search import SweepPrivacy
from engine.jobs.submission import answer_from_store
from engine.jobs.sweep import (
    MAX_RUNS,
    SweepError,
    SweepSubmission,
    expand_sweep,
    grid_configurations,
    point_label,
    privacy_of_sweep,
    submit_sweep,
    sweep_search,
)
from engine.privacy import PrivacyError
from engine.privacy.selection import TrialCount
from engine.training import SpecError, parse_spec


@dataclass(frozen=True)
class SweepPreview:
    """What a grid spec would queue before anything is queued, or the error (naming the field) that stops it."""

    error: str | None = None
    runs: int = 0  # a fixed grid's runs (a private search's count is drawn at launch)
    cached: int = 0  # answered by an identical finished run: nothing trains again
    active: int = 0  # an identical run is already queued or running: the sweep shares it
    search: TrialCount | None = None  # a private search's number of trials
    configurations: int = 0


def preview_sweep(raw_grid: dict) -> SweepPreview:
    """Validate every grid point as `submit_sweep` does and count those the store already answers (reads only).
    A private search draws its trials at launch: only its configurations are checked here."""
    try:
        if (trials := sweep_search(raw_grid)) is not None:
            configurations = grid_configurations(raw_grid)
            for point in configurations:
                try:
                    parse_spec({"seed": 0} | point.spec)
                except SpecError as exc:
                    raise SweepError(f"grid point {point_label(point.values)}", str(exc)) from None
            return SweepPreview(search=trials, configurations=len(configurations))
        points = expand_sweep(raw_grid)
        keys: dict[str, str] = {}
        for point in points:
            label = point_label(point.values)
            try:
                key = parse_spec(point.spec).cache_key(ENGINE_VERSION)
            except SpecError as exc:
                raise SweepError(f"grid point {label}", str(exc)) from None
            if key in keys:
                raise SweepError("grid", f"points {keys[key]} and {label} train the same run")
            keys[key] = label
    except SpecError as exc:
        return SweepPreview(error=str(exc))
    store = get_store()
    answers = [answer_from_store(store, key) for key in keys]
    cached = sum(a is not None and a.cached for a in answers)
    active = sum(a is not None and not a.cached for a in answers)
    return SweepPreview(runs=len(points), cached=cached, active=active, configurations=len(points))


def runs_json(runs: list[RunRecord]) -> str:
    """Stored runs as what releasing them costs depends on (spec, stack, a restart's earlier attempts): the cache
    key of `release_privacy` and `trials_composition`."""
    return json.dumps(
        [[run.spec, run.stack_id, (run.plan or {}).get("earlier_attempts", [])] for run in runs],
        sort_keys=True,
        default=str,
    )


def _to_release(stored_json: str | None) -> list[RunToRelease] | None:
    if stored_json is None:
        return None
    return [
        RunToRelease(spec=spec, stack=stack, earlier_attempts=tuple(earlier))
        for spec, stack, earlier in json.loads(stored_json)
    ]


@st.cache_data(show_spinner="Computing what releasing the best run costs…", max_entries=64)
def release_privacy(raw_grid_json: str, stored_json: str | None = None) -> SweepPrivacy | str:
    """What releasing the best run of a grid spec (JSON text, the cache key) costs, or why it cannot be said;
    `stored_json` (`runs_json`): the sweep's runs as stored (their stacks, the trials a search drew)."""
    try:
        return privacy_of_sweep(json.loads(raw_grid_json), _to_release(stored_json))
    except (SpecError, PrivacyError) as exc:
        return str(exc)


@st.cache_data(show_spinner="Composing the selected runs…", max_entries=64)
def release_together(stored_json: str) -> ReleaseEpsilon | str:
    """What releasing these stored runs (`runs_json`) together costs, a stack's members by their joint ledger, or
    why it cannot be said."""
    try:
        return release_epsilon(_to_release(stored_json))
    except (SpecError, PrivacyError) as exc:
        return str(exc)


@st.cache_data(show_spinner="Composing every trial…", max_entries=64)
def trials_composition(stored_json: str) -> tuple[str, float, float] | str:
    """(accountant, ε, δ) of releasing every one of these stored runs (`runs_json`), or why it cannot be said."""
    try:
        return search.trials_composition(_to_release(stored_json))
    except (SpecError, PrivacyError) as exc:
        return str(exc)


def launch_sweep(raw_grid: dict) -> SweepSubmission:
    return submit_sweep(get_store(), raw_grid)


def list_sweeps() -> list[SweepRecord]:
    return get_store().list_sweeps()


def get_sweep(sweep_id: str) -> SweepRecord | None:
    try:
        return get_store().get_sweep(sweep_id)
    except StoreError:
        return None


def sweep_runs(sweep_id: str) -> list[RunRecord]:
    """A sweep's runs in grid order."""
    return get_store().list_runs(sweep_id=sweep_id, limit=MAX_RUNS)


def why_not_deletable(run_ids: list[str]) -> str | None:
    """Why these runs cannot be deleted (unknown, or queued or running), or None when they can."""
    try:
        check_deletable(get_store(), run_ids)
    except StoreError as exc:
        return str(exc)
    return None


def delete_stored_runs(run_ids: list[str]) -> int:
    """Delete terminal runs with their metrics and history (`StoreError`, nothing deleted, if any is active)."""
    return delete_runs(get_store(), run_ids)

"""How long a configuration will train on this machine, before it is queued: at the pace of finished runs of the
same shape in the store when there are any (what a worker here really took), else at a pace measured now by
timing a few of its steps (`engine.training.pace`), once per shape and device, in a background thread (the page
is drawn meanwhile and asks again)."""

import json
import math
import statistics
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import pandas as pd
import streamlit as st

from app.services.store import get_store, metrics_frame
from cache import RunStatus
from engine.jobs.settings import default_data_dirs
from engine.training import DatasetError, SpecError, parse_spec, pick_device, plan_spec
from engine.training.pace import Pace, measure_pace, pace_shape

HISTORY_SEARCH = 200  # newest finished runs looked through for the same shape
HISTORY_RUNS = 3  # the paces of at most this many of them are combined (their median)
TIMING: Literal["timing"] = "timing"  # what `expected_duration` answers while the configuration's steps are timed


@dataclass(frozen=True, kw_only=True)
class DurationEstimate:
    """A configuration's expected duration here, and where its pace comes from."""

    seconds: float
    pace: Pace
    source: str  # "runs": finished runs of the same shape; "measured": steps timed now
    runs: int = 0  # the finished runs it comes from

    def source_text(self) -> str:
        """Where the pace comes from, in words."""
        where = "CPU" if self.pace.device == "cpu" else "GPU"
        if self.source == "runs":
            runs = "a run" if self.runs == 1 else f"{self.runs} runs"
            return f"at the pace of {runs} of this shape that finished here on the {where}"
        return f"at the pace of {self.pace.steps_timed} steps of this configuration timed just now on the {where}"


def expected_duration(spec_json: str, steps: int, *, wait_s: float = 0.0) -> DurationEstimate | str | None:
    """The expected duration of the raw spec `spec_json` trained for `steps` steps (the plan's T); `TIMING` while
    its steps are being timed (after waiting up to `wait_s` for them); None when its pace cannot be had (an
    invalid spec, or its dataset's files are missing)."""
    try:
        spec = parse_spec(json.loads(spec_json))
    except (SpecError, DatasetError, ValueError):
        return None
    shape, device = json.dumps(pace_shape(spec), sort_keys=True), str(pick_device())
    if (pace := history_pace(shape, device)) is not None:
        return DurationEstimate(seconds=pace[0].seconds(steps), pace=pace[0], source="runs", runs=pace[1])
    timing = pace_timing(shape, device, _spec_json=timing_spec(spec_json))
    try:
        measured = timing.result(timeout=wait_s)
    except TimeoutError:
        return TIMING
    return (
        None
        if measured is None
        else DurationEstimate(seconds=measured.seconds(steps), pace=measured, source="measured")
    )


TIMING_EPOCHS = 10.0  # the timed spec's least epochs: steps enough to time (a step costs the same either way)


def timing_spec(spec_json: str) -> str:
    """The raw spec with its σ given instead of calibrated (a step costs the same; calibration does not), and
    epochs enough for the steps timed (noisy GD takes one step an epoch)."""
    raw = json.loads(spec_json)
    if raw.get("algorithm") in ("dpsgd", "aniso_dpsgd", "noisy_gd", "nonprivate"):
        raw["epochs"] = max(float(raw.get("epochs", 1.0)), TIMING_EPOCHS)
    if "target_epsilon" in raw and raw.get("algorithm") in ("dpsgd", "aniso_dpsgd"):
        raw = {k: v for k, v in raw.items() if k not in ("target_epsilon", "fill_budget", "calibration_accountant")}
        raw["noise_multiplier"] = raw.get("noise_multiplier", 1.0)
    return json.dumps(raw, sort_keys=True)


@st.cache_resource(show_spinner=False)
def _timing_thread() -> ThreadPoolExecutor:
    """One thread times the configurations, one at a time (the timing would slow a second one down)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="dplab-pace")


@st.cache_resource(show_spinner=False, max_entries=64)
def pace_timing(shape: str, device: str, _spec_json: str) -> "Future[Pace | None]":
    """The timing of a few steps of `_spec_json` here, started once per `shape` and `device` (the spec is one of
    that shape: it is not part of the cache key); its result is the pace, None when it cannot be had."""
    return _timing_thread().submit(measured_pace, _spec_json)


def measured_pace(spec_json: str) -> Pace | None:
    """The pace of a few steps of the raw spec, timed now (None for an invalid spec or missing dataset files)."""
    try:
        spec = parse_spec(json.loads(spec_json))
        return measure_pace(spec, data_dirs=default_data_dirs(), plan=plan_spec(spec))
    except (SpecError, DatasetError, ValueError, RuntimeError):
        return None


@st.cache_data(ttl=30, show_spinner=False, max_entries=64)
def history_pace(shape: str, device: str) -> tuple[Pace, int] | None:
    """The median pace of the newest finished runs of `shape` trained here on `device` (their steps, evaluations
    and setup, read from their per-step timing), with how many; None when there are none. Read at most every
    30 s: a run that finishes counts from then on."""
    paces = []
    for run in get_store().list_runs(limit=HISTORY_SEARCH, statuses=[RunStatus.FINISHED]):
        result = run.result or {}
        if run.imported or result.get("device") != device or not isinstance(result.get("seconds"), int | float):
            continue
        try:
            same = json.dumps(pace_shape(parse_spec(run.spec)), sort_keys=True) == shape
        except (SpecError, DatasetError, ValueError):
            continue
        if same and (pace := run_pace(run.id, float(result["seconds"]), device)) is not None:
            paces.append(pace)
            if len(paces) == HISTORY_RUNS:
                break
    if not paces:
        return None
    middle = Pace(
        step_s=statistics.median(p.step_s for p in paces),
        evaluation_s=statistics.median(p.evaluation_s for p in paces),
        setup_s=statistics.median(p.setup_s for p in paces),
        device=device,
        steps_timed=sum(p.steps_timed for p in paces),
    )
    return middle, len(paces)


@st.cache_data(max_entries=256, show_spinner=False)
def run_pace(run_id: str, seconds: float, device: str) -> Pace | None:
    """A finished run's pace from its per-step wall times (`elapsed_s`): the median step without an evaluation,
    the median extra time of a step with one, and the rest of its `seconds` as setup. Cached: a finished run's
    metrics do not change."""
    return pace_of_frame(metrics_frame(run_id), seconds=seconds, device=device)


def pace_of_frame(frame: pd.DataFrame, *, seconds: float, device: str) -> Pace | None:
    """The pace a run's metrics frame shows (None with fewer than two consecutive timed steps). A step's
    `elapsed_s` is taken before its evaluation, so the time between two steps holds the second step and the
    evaluation after the first, if any; the evaluations before the first step and after the last are in `seconds`
    only."""
    if "elapsed_s" not in frame or "step" not in frame:
        return None
    timed = frame[(frame["step"] > 0) & frame["elapsed_s"].notna()].sort_values("step")
    if len(timed) < 2 or timed["step"].diff().eq(1).sum() == 0:
        return None
    took = timed["elapsed_s"].diff().where(timed["step"].diff() == 1)
    evaluated = timed["test_accuracy"].notna() if "test_accuracy" in timed else pd.Series(False, index=timed.index)
    after_evaluation = evaluated.shift(1, fill_value=False).astype(bool)
    plain, with_evaluation = took[~after_evaluation].dropna(), took[after_evaluation].dropna()
    if plain.empty:  # every step evaluated (a short run): the evaluations count as part of the steps
        step_s, evaluation_s = float(with_evaluation.median()), 0.0
    else:
        step_s = float(plain.median())
        evaluation_s = max(0.0, float(with_evaluation.median()) - step_s) if not with_evaluation.empty else 0.0
    setup_s = max(0.0, seconds - float(timed["elapsed_s"].iloc[-1]) - 2 * evaluation_s)
    pace = Pace(
        step_s=step_s, evaluation_s=evaluation_s, setup_s=setup_s, device=device, steps_timed=int(timed["step"].max())
    )
    return pace if all(map(math.isfinite, (step_s, evaluation_s, setup_s))) else None

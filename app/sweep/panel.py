"""The sweep panel: a sweep's progress, its privacy–utility frontier and its runs, polling the store
while runs are queued or running (reads only: a refresh never waits on a worker)."""

import json
import time
from collections import Counter
from functools import partial

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import services
from app.common import charts, report
from app.common.labels import run_name, sweep_name
from app.common.safe_text import literal
from app.common.train_baseline import majority_floor
from app.sweep import release
from app.sweep.frontier import (
    eta_text,
    finished_points,
    frontier,
    grid_table,
    latest_values,
    log_epsilon_axis,
    parameters,
    progress,
    progress_text,
    running_points,
    series_values,
    step_fraction,
)
from app.sweep.grid import label
from cache import RunRecord, RunStatus, SweepRecord

POLL_SECONDS = 2
FRONTIER_NOTE = (
    "Each faint marker is one finished run, each solid marker the mean test accuracy (held-out test set) of a "
    "grid point's seeds with their spread as error bars. x is the ε the runs spent, by the tightest accountant "
    "over the steps actually taken; a grid point is placed at the largest ε among its seeds, a valid upper bound "
    "for each of them. An open marker is a run still training, at its ε and test accuracy so far; a cross, a run "
    "cancelled after it had trained, at its ε and test accuracy when it stopped."
)


def sweep_label(sweep: SweepRecord) -> str:
    """How a sweep reads in its picker: its name, how many runs, and last its id."""
    return f"{sweep_name(sweep)} · {len(sweep.run_ids)} runs · {sweep.id}"


def stacks_text(runs: list[RunRecord]) -> str | None:
    """How many of a sweep's runs were queued to train in vectorized stacks (None: none were)."""
    sizes = Counter(run.stack_id for run in runs if run.stack_id)
    if not sizes:
        return None
    return (
        f"{sum(sizes.values())} of the {len(runs)} runs were queued in {len(sizes)} vectorized "
        f"stack{'s' * (len(sizes) > 1)}: a stack's runs share each step's Poisson lot but draw their own noise, and "
        "each run's ε is its own."
    )


def show(sweep_id: str, *, spread: str) -> None:
    sweep = services.get_sweep(sweep_id)
    if sweep is None:
        st.warning(f"Sweep {literal(sweep_id)} is not in the store (its runs were deleted).")
        return
    runs = services.sweep_runs(sweep_id)
    if any(run.status.active for run in runs):
        _live_sweep(sweep_id, spread)
    else:
        _sweep_body(sweep, runs, spread)


@st.fragment(run_every=POLL_SECONDS)
def _live_sweep(sweep_id: str, spread: str) -> None:
    sweep = services.get_sweep(sweep_id)
    if sweep is None:
        return
    runs = services.sweep_runs(sweep_id)
    _sweep_body(sweep, runs, spread)
    if not any(run.status.active for run in runs):
        st.rerun()  # stop polling: the whole page redraws the finished sweep once


def _sweep_body(sweep: SweepRecord, runs: list[RunRecord], spread: str) -> None:
    headline = st.empty()  # filled last: its first computation takes seconds
    counts = progress(runs)
    plans = _plans(runs)
    planned_steps = {run_id: plan.steps for run_id, plan in plans.items()}
    st.progress(step_fraction(runs, planned_steps), text=progress_text(runs))  # by steps: a run is many
    if counts[RunStatus.RUNNING] and (eta := eta_text(runs, time.time())):
        st.caption(eta)
    if note := stacks_text(runs):
        st.caption(note)
    if counts[RunStatus.QUEUED] and not any(w["healthy"] for w in services.worker_health()):
        st.warning("No worker is running: queued runs wait until one starts (`python -m engine worker`).")
    by_id = {run.id: run for run in runs}
    live = {run.id: latest_values(services.metrics_frame(run.id)) for run in runs if run.status is RunStatus.RUNNING}
    log_x = log_epsilon_axis([plan.epsilon if plan.private and not plan.error else None for plan in plans.values()])
    figure = _frontier(sweep, by_id, spread, running_points(sweep, live), log_x=log_x)
    table = grid_table(sweep, by_id, live, names={run.id: run_name(run) for run in runs})
    st.dataframe(table, hide_index=True, width="stretch")
    if live:
        st.caption(
            f"The {len(live)} running run(s) show their ε so far (RDP, after the steps taken) and latest test "
            "accuracy, in the table and as open markers on the frontier, which take each run's final point when it "
            "finishes."
        )
    st.download_button(
        "Download a report (HTML)",
        data=partial(report.sweep_report, sweep, table, figure, release.report_headline(sweep, runs)),  # on the click
        file_name=f"dplab-sweep-{sweep.id}.html",
        mime="text/html",
        key=f"sweep-report-{sweep.id}",
        icon=":material/description:",
        help="One self-contained page: the grid, the frontier and every run's point, status and result "
        "(released values only).",
    )
    active = [run.id for run in runs if run.status.active]
    if active and st.button(
        f"Cancel the {len(active)} unfinished runs",
        key=f"sweep-cancel-{sweep.id}",
        help="Queued runs are cancelled at once, running ones stop within a step; finished runs are kept.",
    ):
        for run_id in active:
            services.cancel_run(run_id)
    release.headline(sweep, runs, headline)


def _plans(runs: list[RunRecord]) -> dict[str, services.PlanPreview]:
    """Each run's plan (its steps and planned ε, or the error that stops it), from its spec with seed 0: a plan
    does not depend on the seed, so each grid point is planned once (and cached), however many seeds it has."""
    return {run.id: services.preview_plan(json.dumps({**run.spec, "seed": 0}, sort_keys=True)) for run in runs}


def _frontier(
    sweep: SweepRecord, runs: dict[str, RunRecord], spread: str, running: pd.DataFrame, *, log_x: bool
) -> go.Figure | None:
    """The frontier of the finished runs with the `running` ones so far and the cancelled ones where they stopped
    (returned for the report), or a note saying why there is none yet. `log_x`: a logarithmic ε axis."""
    params = parameters(sweep)
    points = finished_points(sweep, runs)
    cancelled = finished_points(sweep, runs, status=RunStatus.CANCELLED)
    finished = sum(run.status is RunStatus.FINISHED for run in runs.values())
    if points.empty and running.empty and cancelled.empty:
        if finished:
            st.info("The finished runs are not private (no finite ε), so they have no place on the frontier.")
        elif not any(run.status.active for run in runs.values()):
            st.info("No run has a point: every run ended (failed or cancelled) before it recorded a result.")
        else:
            st.info(
                f"No run has a point yet: the frontier fills in as runs train, a running run as an open marker at "
                f"its ε and test accuracy so far (it refreshes every {POLL_SECONDS} s while the sweep trains)."
            )
        return None
    if not params:  # a sweep made elsewhere whose grid names nothing this page can draw along
        st.info("This sweep's grid names no parameter to draw the frontier along; its runs are listed below.")
        return None
    summary = frontier(points, params, spread=spread)
    second = params[1] if len(params) > 1 else None
    series = series_values(sweep, second) if second else []
    figure = charts.sweep_frontier_figure(
        summary,
        points,
        first=params[0],
        second=second,
        series=series,
        labels={p: label(p) for p in params},
        references=_references(sweep),
        running=running,
        cancelled=cancelled,
        log_x=log_x,
    )
    st.plotly_chart(figure, key=f"sweep-frontier-{sweep.id}", config=charts.png_config(f"sweep-{sweep.id}-frontier"))
    note = FRONTIER_NOTE
    if finished > len(points):
        note += f" {finished - len(points)} finished run(s) without a finite ε are not shown."
    st.caption(note + " Download the chart as PNG with the camera icon of its toolbar.")
    return figure


def _references(sweep: SweepRecord) -> list[tuple[str, float]]:
    """The non-private accuracy (a finished non-private run of the base's data and model) and, for a registered
    dataset whose files are here, the majority class's accuracy: what the frontier is read against."""
    base = sweep.spec.get("base") if isinstance(sweep.spec, dict) else None
    if not isinstance(base, dict):
        return []
    found = []
    if (baseline := services.nonprivate_baseline(base)) is not None:
        found.append((baseline.label, baseline.test_accuracy))
    if (floor := majority_floor(base.get("dataset"))) is not None:
        found.append(floor)
    return found

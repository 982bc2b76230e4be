"""The figure builders' geometry and colours, without a browser: the target ε label on its line on a log axis, run
colours apart from the accountants', the sweep frontier's ε axis type decided by the grid, its accuracy axis ending
on gridlines above every marker, unlabelled running markers, cancelled runs' points, the sweep's progress by steps,
and Compare's reference lines and legend entry for the audit's bar. `test_browser_charts.py` checks the same in
the page as Chromium draws it."""

import math
import uuid

import pandas as pd
import pytest

from app.common.charts import RUN_PALETTE, accountant_color, epsilon_figure, run_color, runs_frontier_figure
from app.common.charts.accountants import ACCOUNTANT_PALETTE
from app.common.charts.comparison import AUDIT_BAR_NAME, accuracy_axis, sweep_frontier_figure
from app.sweep.frontier import finished_points, frontier, log_epsilon_axis, step_fraction
from cache import RunRecord, RunStatus, SweepRecord
from engine.privacy import ACCOUNTANTS

STEPS = [1, 2, 3, 4]


def _epsilons(**columns: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"step": STEPS, **columns})


def test_the_target_label_sits_on_its_line_on_a_log_axis_and_on_a_linear_one():
    loose = epsilon_figure(_epsilons(epsilon=[0.2, 0.4, 0.6, 0.8], epsilon_naive=[2, 4, 6, 8]), target_epsilon=1.0)
    assert loose.layout.yaxis.type == "log"  # naive composition ten times above RDP
    [line], [label] = loose.layout.shapes, loose.layout.annotations
    assert line.y0 == line.y1 == 1.0, "a shape on a log axis is placed at the value"
    assert label.y == pytest.approx(math.log10(1.0)) and label.yanchor == "bottom", "an annotation at its log10"
    high = epsilon_figure(_epsilons(epsilon=[1, 2, 3, 4], epsilon_naive=[10, 20, 30, 40]), target_epsilon=4.0)
    assert high.layout.yaxis.type == "log" and high.layout.annotations[0].y == pytest.approx(math.log10(4.0))
    tight = epsilon_figure(_epsilons(epsilon=[0.2, 0.4, 0.6, 0.8]), target_epsilon=1.0)
    assert tight.layout.yaxis.type != "log" and tight.layout.annotations[0].y == 1.0


def test_no_run_colour_is_an_accountants_colour():
    assert set(RUN_PALETTE).isdisjoint(ACCOUNTANT_PALETTE)
    assert len({accountant_color(name) for name in ACCOUNTANTS}) == len(ACCOUNTANTS) == 6, "apart from each other"
    ids = [uuid.uuid4().hex[:12] for _ in range(3000)]
    assert {run_color(run_id) for run_id in ids} == set(RUN_PALETTE), "every run colour is the palette's"
    frame = _epsilons(epsilon=[1, 2, 3, 4], epsilon_pld=[1, 2, 3, 3.5], epsilon_naive=[5, 9, 13, 17])
    for color in RUN_PALETTE:  # the run's RDP line against every other accountant's
        colors = [trace.line.color for trace in epsilon_figure(frame, color=color).data]
        assert colors[0] == color and color not in colors[1:], colors


def _summary(points: pd.DataFrame) -> pd.DataFrame:
    return frontier(points, ["noise_multiplier"])


def _points(rows: list[tuple[float, int, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [(sigma, seed, f"r{sigma}{seed}", epsilon, accuracy) for sigma, seed, epsilon, accuracy in rows],
        columns=["noise_multiplier", "seed", "run", "epsilon", "accuracy"],
    )


def test_the_frontiers_epsilon_axis_is_the_grids_choice_live_and_finished():
    assert log_epsilon_axis([5.3, None, 0.33]) and not log_epsilon_axis([3.3, 0.89]) and not log_epsilon_axis([])
    empty = _points([])
    running = _points([(0.8, 0, 1.6, 0.6), (4.0, 0, 0.25, 0.55)]).drop(columns="seed")
    finished = _points([(0.8, 0, 5.0, 0.93), (4.0, 0, 0.31, 0.71)])
    for log_x in (True, False):  # ε 6 apart live, 16 apart finished: the axis keeps the type it is given
        live = sweep_frontier_figure(
            _summary(empty), empty, first="noise_multiplier", second=None, running=running, log_x=log_x
        )
        done = sweep_frontier_figure(_summary(finished), finished, first="noise_multiplier", second=None, log_x=log_x)
        assert live.layout.xaxis.type == done.layout.xaxis.type == ("log" if log_x else "linear")


def test_the_accuracy_axis_ends_on_gridlines_with_room_above_every_marker():
    axis = accuracy_axis([0.71, 0.69, 0.93, 0.91])
    bottom, top = axis["range"]
    assert top > 0.93 + 0.01 and bottom < 0.69 - 0.01
    for end in (bottom, top):  # each end on a gridline
        assert end / axis["dtick"] == pytest.approx(round(end / axis["dtick"]))
    assert (top - bottom) / axis["dtick"] <= 10
    points = _points([(0.8, 0, 5.0, 0.93), (0.8, 1, 5.0, 0.91), (4.0, 0, 0.31, 0.71), (4.0, 1, 0.3, 0.69)])
    fig = sweep_frontier_figure(_summary(points), points, first="noise_multiplier", second=None)
    assert fig.layout.yaxis.range[1] > 0.93 and fig.layout.yaxis.dtick == axis["dtick"]
    assert accuracy_axis([0.5, 0.5])["range"][0] < 0.5 < accuracy_axis([0.5, 0.5])["range"][1]
    assert accuracy_axis([float("nan")]) == {}
    near_one = accuracy_axis([0.1, 0.95, 0.97])
    assert 0.97 < 1.0 < near_one["range"][1] < 1.0 + near_one["dtick"], "the top gridline at 1, not above"


def _run(run_id: str, status: RunStatus, *, step: int, total: int | None, result: dict | None = None) -> RunRecord:
    return RunRecord(
        id=run_id,
        cache_key="",
        spec={},
        engine_version="",
        status=status,
        created_at=0.0,
        started_at=None,
        finished_at=None,
        heartbeat_at=None,
        worker=None,
        total_steps=total,
        progress_step=step,
        plan=None,
        result=result,
        error=None,
        cancel_requested=False,
    )


def test_a_sweeps_progress_counts_steps_and_its_cancelled_runs_keep_their_points():
    runs = [
        _run("a", RunStatus.RUNNING, step=6, total=12),
        _run("b", RunStatus.QUEUED, step=0, total=None),  # planned: 12 steps
        _run("c", RunStatus.CANCELLED, step=3, total=12, result={"epsilon": 0.5, "test_accuracy": 0.6}),
        _run("d", RunStatus.RUNNING, step=20, total=12),
    ]
    assert step_fraction(runs, {"b": 12}) == pytest.approx((6 + 0 + 12 + 12) / 48)
    assert step_fraction(runs[:2], {}) == pytest.approx(6 / 12) and step_fraction([], {}) == 0.0
    sweep = SweepRecord(
        id="s",
        name=None,
        created_at=0.0,
        spec={"base": {}, "grid": {"noise_multiplier": [1.0, 2.0]}},
        run_ids=["a", "b", "c", "d"],
        points=[{"noise_multiplier": s, "seed": 0} for s in (1.0, 2.0, 1.0, 2.0)],
    )
    by_id = {run.id: run for run in runs}
    assert finished_points(sweep, by_id).empty
    cancelled = finished_points(sweep, by_id, status=RunStatus.CANCELLED)
    assert list(cancelled["run"]) == ["c"] and list(cancelled["epsilon"]) == [0.5]
    fig = sweep_frontier_figure(
        _summary(finished_points(sweep, by_id)),
        finished_points(sweep, by_id),
        first="noise_multiplier",
        second=None,
        cancelled=cancelled.drop(columns="seed"),
    )
    crosses = [t for t in fig.data if t.marker.symbol == "x-thin-open"]
    assert [list(t.x) for t in crosses if t.x[0] is not None] == [[0.5]] and [t.showlegend for t in crosses] == [
        False,
        True,
    ]


def test_lines_label_their_points_on_different_sides():
    points = _points([(1.0, 0, 1.0, 0.8), (1.0, 1, 1.0, 0.8)]).assign(lot_size=[32, 64])
    summary = frontier(points, ["noise_multiplier", "lot_size"])
    fig = sweep_frontier_figure(summary, points, first="noise_multiplier", second="lot_size", series=[32, 64])
    labelled = [t for t in fig.data if t.mode == "lines+markers+text"]
    assert len({t.textposition for t in labelled}) == 2, "two lines at one point: their labels do not overprint"


def test_compare_draws_reference_lines_and_names_the_audit_bar_in_the_legend():
    points = pd.DataFrame(
        {
            "run": ["a", "b"],
            "epsilon": [1.0, 2.0],
            "accuracy": [0.8, 0.9],
            "label": ["a", "b"],
            "audited": [0.3, math.nan],
        }
    )
    references = [("majority class", 0.1), ("non-private run n", 0.95)]
    fig = runs_frontier_figure(points, {"a": "σ 1", "b": "σ 2"}, references=references)
    lines = {t.name: t for t in fig.data if t.meta == "reference"}
    assert set(lines) == {"majority class: 0.100", "non-private run n: 0.950"}
    assert list(lines["majority class: 0.100"].y) == [0.1, 0.1] and lines["majority class: 0.100"].line.dash == "dash"
    bottom, top = fig.layout.yaxis.range
    assert bottom < 0.1 and top > 0.95, "every reference line in view"
    assert [t.name for t in fig.data if t.meta == "legend"] == [AUDIT_BAR_NAME]
    plain = runs_frontier_figure(points.assign(audited=math.nan))
    assert not [t for t in plain.data if t.meta], "no audit, no reference: no extra entry"

"""The Sweep page under Streamlit's AppTest: widgets and tooltips, validation, launching a sweep (vectorized
stacks), the frontier of finished runs."""

import pandas as pd
import pytest

from app.common.charts import RUN_PALETTE, sweep_frontier_figure
from app.common.safe_text import unescape
from app.sweep.frontier import finished_points, frontier, running_points
from app.sweep.grid import GridInputError, parse_values
from cache import RunStatus, SweepRecord
from engine.jobs.sweep import submit_sweep
from tests.apptest_helpers import figures, open_page, widgets
from tests.helpers import fast_spec


def test_sweep_page_widgets_have_help_and_the_defaults_are_valid(home, store):
    at = open_page("sweep")
    assert at.title[0].value == "Sweep"
    keys = {w.key for w in widgets(at)}
    assert {
        "sweep_first",
        "sweep_values_target_epsilon",
        "sweep_second",
        "sweep_seeds",
        "sweep_name",
        "sweep_vectorize",
        "sweep_launch",
    } <= keys
    vectorize = at.checkbox(key="sweep_vectorize")
    assert vectorize.label == "Train compatible points together (vectorized)" and vectorize.value is True
    assert "Poisson lot" in vectorize.help and "own noise" in vectorize.help and "ε is its own" in vectorize.help
    assert {
        "sweep_base_dataset",
        "sweep_base_algorithm",
        "sweep_base_delta",
        "sweep_base_clip_norm",
        "sweep_base_lot_size",
        "sweep_base_epochs",
        "sweep_base_lr",
    } <= keys
    assert "dataset" not in keys, "the Train page's form keeps its own widgets"
    no_help = [w.key or w.label for w in widgets(at) if not w.help]
    assert not no_help, no_help
    assert not at.error
    assert any("**10 runs** (5 Target ε values × 2 seeds)" in i.value for i in at.info)
    assert not at.button(key="sweep_launch").disabled
    assert any("No sweep yet" in i.value for i in at.info)
    assert store.list_runs() == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sweep_values_target_epsilon": "1, x"}, "Target ε values: 'x' is not a number"),
        ({"sweep_values_target_epsilon": ""}, "Target ε values: enter at least one value"),
        ({"sweep_values_target_epsilon": "1, 2, 1"}, "Target ε values: '1' is given twice"),
        ({"sweep_values_target_epsilon": "1,,2"}, "Target ε values: an empty value between commas"),
        ({"sweep_values_target_epsilon": "0.001"}, "grid point target_epsilon=0.001, seed=0: target_epsilon: must be"),
        ({"sweep_first": "lot_size", "sweep_values_lot_size": "32, 64.5"}, "Lot size L values: '64.5' is not a whole"),
        ({"sweep_first": "lot_size", "sweep_values_lot_size": "32, 5000"}, "lot_size=5000, seed=0: lot_size: must be"),
        ({"sweep_second": "target_epsilon"}, "Second parameter: Target ε is already the first parameter"),
        ({"sweep_second": "noise_multiplier"}, "Second parameter: target ε and σ are alternatives"),
    ],
)
def test_bad_sweep_values_show_an_error_naming_the_field_and_queue_nothing(home, store, changes, message):
    at = open_page("sweep")
    for key, value in changes.items():
        widget = at.selectbox(key=key) if key in ("sweep_first", "sweep_second") else at.text_input(key=key)
        widget.set_value(value).run()
    assert not at.exception, at.exception
    assert any(message in unescape(e.value) for e in at.error), [e.value for e in at.error]  # typed text: escaped
    assert at.button(key="sweep_launch").disabled
    assert store.list_runs() == [] and store.list_sweeps() == []


def test_launch_queues_a_sweep_of_every_point_and_seed(home, store, monkeypatch):
    monkeypatch.delenv("DPLAB_STACK_MAX", raising=False)  # the default: at most 8 runs a stack
    at = open_page("sweep")
    at.selectbox(key="sweep_first").set_value("noise_multiplier").run()
    at.text_input(key="sweep_values_noise_multiplier").set_value("1, 2").run()
    at.selectbox(key="sweep_second").set_value("lot_size").run()
    at.text_input(key="sweep_values_lot_size").set_value("32, 64").run()
    at.number_input(key="sweep_seeds").set_value(3).run()
    at.text_input(key="sweep_name").set_value("σ × L").run()
    assert any("**12 runs**" in i.value and "12 to train" in i.value for i in at.info)
    at.button(key="sweep_launch").click().run()
    assert not at.exception, at.exception

    [sweep] = store.list_sweeps()
    assert sweep.name == "σ × L" and len(sweep.run_ids) == 12
    assert sweep.points[0] == {"noise_multiplier": 1.0, "lot_size": 32, "seed": 0}
    runs = store.list_runs(sweep_id=sweep.id)
    assert [r.status for r in runs] == [RunStatus.QUEUED] * 12
    assert {r.spec["lot_size"] for r in runs} == {32, 64} and all("target_epsilon" not in r.spec for r in runs)
    # vectorized by default: one stack per lot size (the lots differ), its 2 σ × 3 seeds together
    stacks = {r.stack_id for r in runs}
    assert None not in stacks and len(stacks) == 2
    assert all(len({r.spec["lot_size"] for r in runs if r.stack_id == s}) == 1 for s in stacks)
    assert any(
        sweep.id in s.value and "12 runs queued, 12 of them in 2 vectorized stacks (K ≤ 8); 0 from the cache" in s.value
        for s in at.success
    ), [s.value for s in at.success]
    assert any(c.value.startswith("12 of the 12 runs were queued in 2 vectorized stacks") for c in at.caption)
    assert at.selectbox(key="sweep_shown").value == sweep.id
    assert any(p.proto.text.startswith("0 / 12 finished · 12 queued") for p in at.get("progress"))
    table = next(d.value for d in at.dataframe if "status" in d.value)
    assert len(table) == 12 and set(table["status"]) == {"queued"}
    assert any("No run has a point yet" in i.value for i in at.info)

    at.button(key="sweep_launch").click().run()  # the same grid again: every point is already queued
    assert len(store.list_runs()) == 12 and len(store.list_sweeps()) == 2


def test_vectorized_stacks_are_capped_and_can_be_turned_off(home, store, monkeypatch):
    monkeypatch.setenv("DPLAB_STACK_MAX", "3")
    at = open_page("sweep")
    at.selectbox(key="sweep_first").set_value("noise_multiplier").run()
    at.text_input(key="sweep_values_noise_multiplier").set_value("1, 2").run()
    at.button(key="sweep_launch").click().run()  # on: 2 σ × 2 seeds share their lots, cut into stacks of ≤ 3
    assert any(
        "4 runs queued, 3 of them in 1 vectorized stack (K ≤ 3); 0 from the cache" in s.value for s in at.success
    ), [s.value for s in at.success]
    assert sorted(r.stack_id is None for r in store.list_runs()) == [False, False, False, True]

    at.checkbox(key="sweep_vectorize").uncheck().run()
    at.number_input(key="sweep_seeds").set_value(3).run()  # the 4 queued points again, and 2 new ones
    at.button(key="sweep_launch").click().run()
    assert not at.exception, at.exception
    assert any("2 runs queued; 0 from the cache, 4 already queued or running." in s.value for s in at.success)
    assert not any("vectorized" in s.value for s in at.success)
    new = [r for r in store.list_runs() if r.spec["seed"] == 2]
    assert len(new) == 2 and all(r.stack_id is None for r in new)
    assert store.list_sweeps()[0].spec["vectorize"] is False


def test_a_run_trained_in_a_stack_says_what_releasing_the_stack_costs(trained_store):
    run = trained_store.list_runs()[0]
    stack = run.result["stack"]  # the module's tiny σ sweep trained as one stack of 2
    assert stack["members"] == 2 and run.stack_id is not None
    at = open_page("runs")
    at.selectbox(key="open_run").set_value(run.id).run()
    assert not at.exception, at.exception
    [note] = [i.value for i in at.info if "vectorized stack" in i.value]
    by = {"rdp": "RDP", "pld": "PLD"}[stack["joint_accountant"]]
    assert note == (
        "Trained in a vectorized stack of 2 runs that shared each step's Poisson lot. This run's ε is its own; "
        f"releasing all 2 runs of the stack together costs ε = {stack['joint_epsilon']:.3g} ({by}, δ = 1e-05): "
        "each run drew its own noise, so that is 2 Gaussian releases of each shared lot, composed with every "
        "up-front release (DP-PCA)."
    )
    assert stack["joint_epsilon"] > run.result["epsilon"]


def test_frontier_shows_the_finished_runs_and_the_preview_counts_cached_points(trained_store):
    store = trained_store
    runs = {r.spec["noise_multiplier"]: r for r in store.list_runs()}
    at = open_page("sweep")
    assert any(p.proto.text.startswith("2 / 2 finished") for p in at.get("progress"))
    [figure] = figures(at)
    each_run, line, *references = figure["data"]
    assert [r["name"].split(":")[0] for r in references] == ["majority class"]  # the floor, dashed, in the legend
    assert all(r["line"]["dash"] == "dash" for r in references)
    assert sorted(each_run["x"]) == sorted(r.result["epsilon"] for r in runs.values())
    assert line["mode"] == "lines+markers+text" and line["text"] == ["2", "1"]  # sorted by ε: σ = 2 spends less
    assert line["x"] == [runs[2.0].result["epsilon"], runs[1.0].result["epsilon"]]
    assert line["y"] == pytest.approx([runs[2.0].result["test_accuracy"], runs[1.0].result["test_accuracy"]])
    table = next(d.value for d in at.dataframe if "status" in d.value)
    assert list(table["status"]) == ["finished", "finished"]

    # the same grid from the form: both points come from the cache
    at.radio(key="sweep_base_privacy_by").set_value("noise_multiplier").run()
    at.number_input(key="sweep_base_lot_size").set_value(128).run()
    at.number_input(key="sweep_base_epochs").set_value(1.0).run()
    at.selectbox(key="sweep_first").set_value("noise_multiplier").run()
    at.text_input(key="sweep_values_noise_multiplier").set_value("1, 2").run()
    at.number_input(key="sweep_seeds").set_value(1).run()
    assert any("**2 runs**" in i.value and "2 already cached" in i.value and "0 to train" in i.value for i in at.info)
    at.button(key="sweep_launch").click().run()
    assert any("0 runs queued; 2 from the cache" in s.value for s in at.success)
    assert len(store.list_runs()) == 2


def test_frontier_aggregates_seeds_and_keeps_each_line_colour():
    points = pd.DataFrame(
        [
            (σ, lot, seed, f"r{σ}{lot}{seed}", 1.0 / σ + seed * 0.01, 0.5 + lot / 1000 + seed * 0.1)
            for σ in (1.0, 2.0)
            for lot in (32, 64)
            for seed in (0, 1)
        ],
        columns=["noise_multiplier", "lot_size", "seed", "run", "epsilon", "accuracy"],
    )
    summary = frontier(points, ["noise_multiplier", "lot_size"])
    assert len(summary) == 4 and list(summary["seeds"]) == [2] * 4
    row = summary[(summary["noise_multiplier"] == 1.0) & (summary["lot_size"] == 64)].iloc[0]
    assert row["epsilon"] == pytest.approx(1.01), "a grid point sits at the largest ε of its seeds"
    assert (row["accuracy"], row["low"], row["high"]) == pytest.approx((0.614, 0.564, 0.664))
    std = frontier(points, ["noise_multiplier", "lot_size"], spread="std").iloc[0]
    assert std["high"] - std["accuracy"] == pytest.approx(0.0707, abs=1e-4)

    only_64 = points[points["lot_size"] == 64]  # lot 32 has no finished run yet: lot 64 keeps the second colour
    fig = sweep_frontier_figure(
        frontier(only_64, ["noise_multiplier", "lot_size"]),
        only_64,
        first="noise_multiplier",
        second="lot_size",
        series=[32, 64],
    )
    lines = [t for t in fig.data if t.mode == "lines+markers+text"]
    assert [t.name for t in lines] == ["lot_size = 32", "lot_size = 64"]
    assert lines[1].marker.color == RUN_PALETTE[1] and len(lines[1].x) == 2 and len(lines[0].x) == 0


def test_running_runs_are_open_markers_in_their_lines_colour_at_their_values_so_far():
    sweep = SweepRecord(
        id="s1",
        name=None,
        created_at=0.0,
        spec={"base": fast_spec(), "grid": {"noise_multiplier": [1.0, 2.0], "lot_size": [32, 64]}},
        run_ids=["a", "b", "c"],
        points=[
            {"noise_multiplier": 1.0, "lot_size": 32, "seed": 0},
            {"noise_multiplier": 2.0, "lot_size": 64, "seed": 0},
            {"noise_multiplier": 1.0, "lot_size": 64, "seed": 0},
        ],
    )
    live = {"a": (0.4, 0.61), "b": (0.2, None), "c": (0.3, 0.7)}  # b has no test accuracy yet: no marker
    running = running_points(sweep, live)
    assert list(running["run"]) == ["a", "c"] and list(running["epsilon"]) == [0.4, 0.3]
    empty = frontier(finished_points(sweep, {}), ["noise_multiplier", "lot_size"])
    fig = sweep_frontier_figure(
        empty,
        finished_points(sweep, {}),
        first="noise_multiplier",
        second="lot_size",
        series=[32, 64],
        running=running,
        references=[("majority class", 0.125)],
    )
    moving = [t for t in fig.data if t.marker.symbol == "circle-open"]
    by_name = {t.name: t for t in moving}
    assert list(by_name["lot_size = 32 (running)"].x) == [0.4] and list(by_name["lot_size = 64 (running)"].y) == [0.7]
    assert by_name["lot_size = 64 (running)"].marker.color == RUN_PALETTE[1]
    assert [t.name for t in moving if t.showlegend] == ["running: ε and test accuracy so far"]
    assert by_name["lot_size = 32 (running)"].text is None, "seeds of a point sit together: values in the tooltip"
    assert "noise_multiplier %{customdata[1]}" in by_name["lot_size = 32 (running)"].hovertemplate
    assert fig.layout.xaxis.type != "log"  # ε from 0.3 to 0.4: a linear axis from 0 …
    [reference] = [t for t in fig.data if t.name == "majority class: 0.125"]
    assert list(reference.x) == [0.0, pytest.approx(0.52)]  # … which the reference line spans from 0


def test_values_parse_as_numbers_in_the_order_typed():
    assert parse_values("f", " 0.5, 1,2e0 ") == [0.5, 1.0, 2.0]
    assert parse_values("f", "32, 64", integer=True) == [32, 64]
    with pytest.raises(GridInputError, match=r"^f: 'inf' is not a finite number"):
        parse_values("f", "1, inf")


def test_sweep_page_without_sweeps_and_an_existing_sweep_from_the_command_line(home, store):
    sweep = submit_sweep(store, {"base": fast_spec(), "grid": {"lr": [0.5, 1.0]}})
    at = open_page("sweep")
    assert at.selectbox(key="sweep_shown").value == sweep.sweep_id
    table = next(d.value for d in at.dataframe if "status" in d.value)
    assert list(table["Learning rate"]) == [0.5, 1.0]


def test_every_run_of_a_sweep_can_be_audited(home, store):
    at = open_page("sweep")
    box = at.checkbox(key="sweep_base_audit")
    assert "lower bound" in box.help and "never stack" in box.help
    box.check().run()
    at.number_input(key="sweep_base_audit_canaries").set_value(300).run()
    assert at.radio(key="sweep_base_audit_kind").help
    at.button(key="sweep_launch").click().run()
    assert not at.exception, at.exception
    runs = store.list_runs()
    assert len(runs) == 10 and all(r.spec["audit"] == {"canaries": 300, "kind": "gradient"} for r in runs)
    assert all(r.stack_id is None for r in runs), "audited runs train alone"

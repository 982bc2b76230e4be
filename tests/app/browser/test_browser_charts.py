"""The charts as a browser draws them, on one dashboard over a fresh store: a run's ε chart on a log axis (the
target ε label on its line; the run's colour no accountant's), a sweep while it trains and after it finishes (the
progress bar by steps, one ε axis type throughout, every marker below the top gridline, no two point labels on top
of each other), a cancelled sweep's points, and Compare's reference lines and the legend entry of the audit's bar.

One tiny digits run trains for real (beside the server's start); the sweeps' runs are written to the store as a
worker would (plan, metrics, result), so that the page is caught in a known state. Screenshots: browser-charts-*.png
in the `artifacts` folder ($DPLAB_TEST_ARTIFACTS, else pytest's temporary folder; see conftest.py).

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (see tests/browser_helpers.py).
"""

import uuid
from pathlib import Path

import pytest
from playwright.sync_api import Page

from app.common.charts import RUN_PALETTE, run_color
from cache import RunRecord, RunStatus, Store
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests import browser_helpers as helpers
from tests.app.browser.test_browser_compare import BackgroundTraining, _screenshot_whole_page, _select_runs
from tests.apptest_helpers import TINY_BASE
from tests.helpers import free_port

TIMEOUT_MS = 300_000  # the first page of a fresh server imports the engine: minutes on a loaded machine
EPSILON_TITLE = "Cumulative privacy loss"
FRONTIER_TITLE = "Privacy–utility frontier"
# The visible chart whose title holds `title` (stale, zero-size copies of a rerunning fragment skipped), read from
# what Plotly drew: its full layout and traces, every point label's and legend entry's box and text.
CHART_JS = """
(title) => {
    const chart = Array.from(document.querySelectorAll('.js-plotly-plot')).find(c => {
        const r = c.getBoundingClientRect();
        return r.width > 0 && r.height > 0 && c._fullLayout && (c.layout.title?.text || '').includes(title);
    });
    if (!chart) return null;
    const box = e => {
        const r = e.getBoundingClientRect();
        return {x: r.x, y: r.y, width: r.width, height: r.height};
    };
    const axis = a => ({type: a.type, range: a.range, ticks: (a._vals || []).map(v => v.x)});
    return {
        xaxis: axis(chart._fullLayout.xaxis),
        yaxis: axis(chart._fullLayout.yaxis),
        traces: chart._fullData.map(t => ({
            name: t.name, mode: t.mode || '', color: t.line?.color || t.marker?.color || '',
            y: Array.from(t.y || []).filter(v => v !== null),
            high: t.error_y?.visible ? Array.from(t.error_y.array || []) : [],
        })),
        labels: Array.from(chart.querySelectorAll('g.textpoint text')).filter(e => e.textContent).map(box),
        legend: Array.from(chart.querySelectorAll('.legendtext')).map(e => e.textContent),
        annotations: Array.from(chart.querySelectorAll('g.annotation')).map(e => ({text: e.textContent, ...box(e)})),
        shapes: Array.from(chart.querySelectorAll('.shapelayer path')).map(box),
    };
}
"""
PROGRESS_JS = (
    "() => document.querySelector('[data-testid=stProgress] [role=progressbar]')?.getAttribute('aria-valuenow')"
)
# The sweeps: σ 0.8 and 4 (a planned ε of 5.3 and 0.33 on the tiny digits run: a log ε axis), two seeds each.
SIGMAS, SEEDS, STEPS = (0.8, 4.0), (0, 1), 12
LIVE = {0.8: (2, 1.6, 0.60), 4.0: (10, 0.25, 0.55)}  # σ → (steps taken, ε and test accuracy so far) while training
FINAL = {0.8: (5.0, 0.93), 4.0: (0.31, 0.71)}  # σ → (ε, test accuracy) when finished (seed 1: accuracy − 0.02)


def _forged_run(store: Store, spec: dict, *, steps: int, epsilon: float, accuracy: float) -> str:
    """A run RUNNING for a worker that does not exist, `steps` of its `STEPS` taken, with its ε and accuracy so far."""
    run_id = store.create_run(
        spec=spec, cache_key=uuid.uuid4().hex, engine_version="test", status=RunStatus.RUNNING, worker="forged"
    )
    store.set_plan(run_id, plan={}, total_steps=STEPS)
    store.append_metrics(
        run_id, [(step, {"epsilon": epsilon * step / steps, "test_accuracy": accuracy}) for step in (1, steps)]
    )
    return run_id


def _result(epsilon: float, accuracy: float, steps: int) -> dict:
    return {
        "private": True,
        "epsilon": epsilon,
        "test_accuracy": accuracy,
        "delta": 1e-5,
        "steps": steps,
        "stopped_early": steps < STEPS,
        "epsilons": {"rdp": epsilon * 1.1, "pld": epsilon},
    }


def _sweep(store: Store, name: str, states: dict[tuple[float, int], tuple[int, float, float]]) -> tuple[str, list[str]]:
    """A sweep over `SIGMAS` × `SEEDS` whose runs are in `states` ((σ, seed) → steps, ε, accuracy so far)."""
    members = []
    for (sigma, seed), (steps, epsilon, accuracy) in states.items():
        spec = {**TINY_BASE, "noise_multiplier": sigma, "seed": seed}
        members.append(
            (
                {"noise_multiplier": sigma, "seed": seed},
                _forged_run(store, spec, steps=steps, epsilon=epsilon, accuracy=accuracy),
            )
        )
    grid = {"name": name, "base": TINY_BASE, "grid": {"noise_multiplier": list(SIGMAS)}, "seeds": list(SEEDS)}
    sweep_id, _ = store.create_sweep(spec=grid, name=name, members=members)
    return sweep_id, [run_id for _, run_id in members]


def _copy(store: Store, run: RunRecord, *, spec: dict | None = None, result: dict | None = None) -> str:
    """A finished copy of `run` (its plan, metrics and result, with `spec` and `result` changes) under a new id."""
    copy = store.create_run(
        spec={**run.spec, **(spec or {})},
        cache_key=uuid.uuid4().hex,
        engine_version=run.engine_version,
        status=RunStatus.RUNNING,
        worker="forged",
    )
    store.set_plan(copy, plan=run.plan or {}, total_steps=run.total_steps or STEPS)
    rows: dict[int, dict[str, float]] = {}
    for step, name, value in store.metrics(run.id):
        rows.setdefault(step, {})[name] = value
    store.append_metrics(copy, sorted(rows.items()))
    store.finish(copy, status=RunStatus.FINISHED, result={**(run.result or {}), **(result or {})}, worker="forged")
    return copy


def _chart(page: Page, title: str, ready: str = "true") -> dict:
    """The chart titled `title` once `ready` (a JavaScript condition on it, `c`) holds."""
    page.wait_for_function(
        f"(t) => {{ const c = ({CHART_JS})(t); return c && ({ready}); }}", arg=title, timeout=TIMEOUT_MS, polling=250
    )
    page.wait_for_function(helpers.IDLE_JS, timeout=TIMEOUT_MS, polling=250)
    return page.evaluate(CHART_JS, title)


def _overlapping(boxes: list[dict]) -> list[tuple[dict, dict]]:
    return [
        (a, b)
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    ]


def _markers_below_top_gridline(chart: dict) -> None:
    """Every marker and error bar under the top gridline, which is at or below the axis's top."""
    highest = max(
        y + (t["high"][i] if i < len(t["high"]) else 0) for t in chart["traces"] for i, y in enumerate(t["y"])
    )
    top_gridline = max(chart["yaxis"]["ticks"])
    assert highest <= top_gridline <= chart["yaxis"]["range"][1] + 1e-9, (highest, chart["yaxis"])
    assert top_gridline - highest > 0.01 * (chart["yaxis"]["range"][1] - chart["yaxis"]["range"][0]), "no headroom"


@pytest.mark.browser
@pytest.mark.slow
def test_charts_in_browser(tmp_path: Path, artifacts: Path) -> None:
    home = tmp_path / "home"
    env, port, server_log = helpers.dashboard_env(home), free_port(), tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log)
    failure_png = helpers.fresh_artifact(artifacts, "browser-charts-failure.png")
    errors = helpers.ConsoleErrors()
    store = Store(home / "runs.sqlite3")
    trained = submit(store, parse_spec({**TINY_BASE, "target_epsilon": 1.0})).run_id
    training = BackgroundTraining(store, 1)
    training.start()  # while the server and the browser start
    _, cancelled = _sweep(
        store, "cancelled", {(s, seed): (3, 0.2 if s == 4.0 else 2.0, 0.5) for s in SIGMAS for seed in SEEDS}
    )
    for run_id in cancelled[:-1]:  # stopped after 3 steps with a result, the last before it recorded one
        run = store.get_run(run_id)
        store.finish(
            run_id,
            status=RunStatus.CANCELLED,
            worker="forged",
            result=_result(0.2 if run.spec["noise_multiplier"] == 4.0 else 2.0, 0.5, 3),
        )
    store.finish(cancelled[-1], status=RunStatus.CANCELLED, worker="forged")
    _, live = _sweep(store, "live", {(s, seed): LIVE[s] for s in SIGMAS for seed in SEEDS})
    with helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail), helpers.chromium() as browser:
        page = errors.watch(browser.new_page(viewport={"width": 1400, "height": 1400}))
        try:
            page.goto(helpers.dashboard_url(port), wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            training.wait(store, [trained], fail)
            run = store.get_run(trained)
            # a copy whose colour is the palette's second, orange: PLD's once (a hash of the id picks the colour)
            shown = next(c for c in (_copy(store, run) for _ in range(200)) if run_color(c) == RUN_PALETTE[1])
            audited = _copy(store, run, spec={"seed": 1}, result={"audit": {"epsilon": 0.3}, "test_accuracy": 0.6})
            _copy(store, run, spec={"algorithm": "nonprivate"}, result={"test_accuracy": 0.95, "private": False})

            # A run's ε chart: a log axis (naive composition far above RDP), the target's label on its line.
            page.goto(f"{helpers.dashboard_url(port)}?run={shown}", wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            epsilon = _chart(page, EPSILON_TITLE, "c.yaxis.type === 'log' && c.annotations.length > 0")
            _screenshot_whole_page(page, artifacts / "browser-charts-run.png", width=1400)
            [label] = [a for a in epsilon["annotations"] if a["text"].startswith("target ε")]
            [line] = epsilon["shapes"]
            line_y = line["y"] + line["height"] / 2
            assert abs(label["y"] + label["height"] - line_y) < 10, (
                f"target label {label} far from its line at {line_y}"
            )
            colors = {t["name"].split(":")[0]: t["color"].upper() for t in epsilon["traces"]}
            rdp = colors.pop("RDP (every step)")
            assert rdp == run_color(shown).upper() and rdp not in colors.values(), (rdp, colors)

            # The sweep while it trains: progress by steps, and its frontier.
            page.get_by_role("link", name="Sweep").click(timeout=TIMEOUT_MS)
            training_chart = _chart(page, FRONTIER_TITLE, "c.traces.some(t => t.name.endsWith('(running)'))")
            _screenshot_whole_page(page, artifacts / "browser-charts-sweep-live.png", width=1400)
            done = sum(LIVE[s][0] for s in SIGMAS for _ in SEEDS) / (STEPS * len(SIGMAS) * len(SEEDS))
            assert float(page.evaluate(PROGRESS_JS)) == pytest.approx(100 * done, abs=1), "progress by steps"
            assert not _overlapping(training_chart["labels"]), training_chart["labels"]
            assert training_chart["xaxis"]["type"] == "log", "σ from 0.8 to 4: planned ε 16 times apart"

            for run_id, (sigma, seed) in zip(live, [(s, seed) for s in SIGMAS for seed in SEEDS], strict=True):
                epsilon_final, accuracy = FINAL[sigma]
                store.append_metrics(
                    run_id, [(STEPS, {"epsilon": epsilon_final, "test_accuracy": accuracy - 0.02 * seed})]
                )
                store.finish(
                    run_id,
                    status=RunStatus.FINISHED,
                    worker="forged",
                    result=_result(epsilon_final, accuracy - 0.02 * seed, STEPS),
                )
            finished = _chart(page, FRONTIER_TITLE, "!c.traces.some(t => t.name.includes('running'))")
            _screenshot_whole_page(page, artifacts / "browser-charts-sweep-finished.png", width=1400)
            assert finished["xaxis"]["type"] == training_chart["xaxis"]["type"], "one ε axis type, live and finished"
            assert float(page.evaluate(PROGRESS_JS)) == pytest.approx(100)
            _markers_below_top_gridline(finished)
            assert not _overlapping(finished["labels"]), finished["labels"]

            # The cancelled sweep: its runs' points where they stopped.
            picker = page.get_by_test_id("stSelectbox").filter(has=page.get_by_text("Sweep", exact=True))
            picker.click(timeout=TIMEOUT_MS)
            page.get_by_role("option").filter(has_text="cancelled").first.click(timeout=TIMEOUT_MS)
            stopped = _chart(page, FRONTIER_TITLE, "c.traces.some(t => t.name.endsWith('(cancelled)') && t.y.length)")
            assert not page.get_by_text("No run has a point yet").count()
            assert (
                sum(len(t["y"]) for t in stopped["traces"] if t["name"].endswith("(cancelled)")) == len(cancelled) - 1
            )
            _screenshot_whole_page(page, artifacts / "browser-charts-sweep-cancelled.png", width=1400)

            # Compare: the majority class and the non-private run as lines, the audit's bar in the legend.
            page.get_by_role("link", name="Compare").click(timeout=TIMEOUT_MS)
            page.get_by_text("Compare runs").first.wait_for(timeout=TIMEOUT_MS)
            _select_runs(page, [trained, audited])
            compare = _chart(page, "frontier of the selected runs", "c.legend.length >= 5")
            page.mouse.move(0, 0)
            _screenshot_whole_page(page, artifacts / "browser-charts-compare.png", width=1400)
            legend = " | ".join(compare["legend"])
            assert "majority class: 0." in legend and "non-private" in legend and ": 0.950" in legend, legend
            assert "audited lower bound ε̂" in legend, legend
            _markers_below_top_gridline(compare)
            assert not errors, f"console errors: {errors}"
        except Exception as exc:
            fail(helpers.failure_report(exc, page, screenshot=failure_png, errors=errors, charts_js=CHART_JS))

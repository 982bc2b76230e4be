"""The Compare page in a real browser: with two finished tiny runs in a fresh store, select both in
headless Chromium, check that every chart draws both runs, download the table as CSV, and see no
console error. Screenshot: browser-compare.png in the `artifacts` folder ($DPLAB_TEST_ARTIFACTS, else pytest's
temporary folder; see conftest.py).

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (see tests/browser_helpers.py).
"""

import csv
import io
import threading
from pathlib import Path

import pytest
from playwright.sync_api import Page

from app.common.labels import short_labels
from cache import Store
from engine.jobs.sweep import submit_sweep
from engine.jobs.workers.worker import Worker
from tests import browser_helpers as helpers
from tests.apptest_helpers import TINY_SWEEP
from tests.helpers import free_port

TIMEOUT_MS = 30_000
TRAIN_TIMEOUT_S = 90
CHART_TITLES = ["Test accuracy", "Cumulative ε spent", "Privacy–utility frontier of the selected runs"]
# The visible Plotly charts: their title and the names of their runs' traces (read from the chart's own `data`;
# reference lines and legend-only entries, marked by `meta`, left out).
CHARTS_JS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(chart => { const r = chart.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
    .map(chart => ({
        title: (chart.layout && chart.layout.title && chart.layout.title.text) || '',
        traces: (chart.data || []).filter(trace => !trace.meta).map(trace => trace.name),
        drawn: chart.querySelectorAll('g.scatterlayer g.trace').length - (chart.data || []).filter(t => t.meta).length,
    }))
"""
# Every expected chart is on the page and draws exactly the given runs (by their legend names).
ALL_DRAWN_JS = f"""
([titles, runIds]) => {{
    const charts = ({CHARTS_JS})();
    return titles.every(title => charts.some(chart => chart.title.includes(title)
        && JSON.stringify(chart.traces) === JSON.stringify(runIds) && chart.drawn === runIds.length));
}}
"""


def _select_runs(page: Page, run_ids: list[str]) -> None:
    """Type each run id into the "Runs to compare" multiselect and take the option it leaves (Enter)."""
    box = page.get_by_test_id("stMultiSelect").filter(has_text="Runs to compare")
    field = box.locator("input")
    for run_id in run_ids:
        field.click(timeout=TIMEOUT_MS)
        field.fill(run_id)
        page.get_by_role("option", name=run_id).first.wait_for(timeout=TIMEOUT_MS)
        field.press("Enter")
        box.get_by_text(run_id).first.wait_for(timeout=TIMEOUT_MS)
    page.keyboard.press("Escape")


class BackgroundTraining(threading.Thread):
    """Trains the queued runs of a store in this process, beside the browser (`Worker.run_one`: no signal
    handlers, which only the main thread may install)."""

    def __init__(self, store: Store, runs: int):
        super().__init__(name="tiny-runs", daemon=True)
        self.store, self.runs, self.error = store, runs, None

    def run(self) -> None:
        try:
            worker = Worker(self.store, data_dirs=[])
            for _ in range(self.runs):
                worker.run_one()
        except Exception as exc:  # reported by the test
            self.error = exc

    def wait(self, store: Store, run_ids: list[str], fail: helpers.Fail) -> None:
        self.join(TRAIN_TIMEOUT_S)
        statuses = [store.get_run(run_id).status.value for run_id in run_ids]
        if self.is_alive() or self.error or statuses != ["finished"] * len(run_ids):
            fail(f"the tiny runs did not finish in {TRAIN_TIMEOUT_S} s: {statuses} ({self.error!r})")


def _screenshot_whole_page(page: Page, path: Path, *, width: int = 1500) -> None:
    """Streamlit scrolls inside its main block, so a "full page" shot is one viewport: grow the viewport."""
    page.set_viewport_size({"width": width, "height": 1100})
    page.wait_for_timeout(500)  # the layout follows the new width
    height = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": width, "height": min(int(height) + 40, 6000)})
    page.wait_for_timeout(500)  # charts follow the new size
    page.screenshot(path=path, full_page=True)


@pytest.mark.browser
@pytest.mark.slow
def test_compare_two_runs_in_browser(tmp_path: Path, artifacts: Path) -> None:
    home = tmp_path / "home"
    env, port, server_log = helpers.dashboard_env(home), free_port(), tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log)
    failure_png = helpers.fresh_artifact(artifacts, "browser-compare-failure.png")
    errors = helpers.ConsoleErrors()
    store = Store(home / "runs.sqlite3")
    run_ids = list(submit_sweep(store, TINY_SWEEP).run_ids)
    training = BackgroundTraining(store, len(run_ids))
    training.start()  # while the server and the browser start
    with helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail), helpers.chromium() as browser:
        page = errors.watch(browser.new_page(viewport={"width": 1500, "height": 1100}, accept_downloads=True))
        try:
            # through the sidebar: a deep link makes Streamlit probe /compare/_stcore/ (404s in the console)
            page.goto(helpers.dashboard_url(port), wait_until="domcontentloaded", timeout=60_000)
            training.wait(store, run_ids, fail)
            page.get_by_role("link", name="Compare").click(timeout=60_000)
            page.get_by_text("Compare runs").first.wait_for(timeout=TIMEOUT_MS)
            _select_runs(page, run_ids)
            names = short_labels([store.get_run(run_id) for run_id in run_ids])  # "σ 1", "σ 2": what differs
            shown = [names[run_id] for run_id in run_ids]
            page.wait_for_function(ALL_DRAWN_JS, arg=[CHART_TITLES, shown], timeout=TIMEOUT_MS, polling=200)

            with page.expect_download(timeout=TIMEOUT_MS) as download:
                page.get_by_role("button", name="Download the table (CSV)").click()
            assert download.value.suggested_filename == "dplab-runs.csv"
            rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
            assert [row["run"] for row in rows] == run_ids
            assert {row["noise_multiplier"] for row in rows} == {"1.0", "2.0"}
            assert all(float(row["epsilon"]) > 0 and 0 < float(row["test_accuracy"]) <= 1 for row in rows)

            page.mouse.move(0, 0)  # no tooltip in the picture
            _screenshot_whole_page(page, artifacts / "browser-compare.png")
            _screenshot_whole_page(page, artifacts / "browser-compare-800.png", width=800)  # columns stack
            assert not errors, f"console errors: {errors}"
        except Exception as exc:
            fail(helpers.failure_report(exc, page, screenshot=failure_png, errors=errors, charts_js=CHARTS_JS))

"""End to end in a real browser: start a worker and the Streamlit dashboard on a fresh data home, stretch the
fast digits demo to 400 epochs with the keyboard, press Train in headless Chromium, and check that the ε and
accuracy charts gain points while the run trains; then cancel it, and see the cancelled run with all its
charts (and the form's planned ε), also when its URL is opened again (in the dark theme); no browser console
error throughout.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to the `artifacts` folder ($DPLAB_TEST_ARTIFACTS, else pytest's temporary folder; see conftest.py):
browser-train-live.png (while training), browser-train.png (cancelled, light theme), browser-train-dark.png (the
reopened URL, dark theme).
"""

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page

from engine.privacy.planning import steps_for
from engine.training import DATASETS
from tests import browser_helpers as helpers
from tests.helpers import free_port

TIMEOUT_MS = 90_000
EPSILON_TITLE = "Cumulative privacy loss"
ACCURACY_TITLE = "Accuracy"
DIAGNOSTICS_TITLE = "Private diagnostics"
EXPECTED_TITLES = ["Planned ε over the run", ACCURACY_TITLE, EPSILON_TITLE, "Training loss", DIAGNOSTICS_TITLE]
LONG_EPOCHS = 1000  # typed into the form (the engine's most): 22,470 digits steps, far more than the test watches

# The charts a user can see, each as {title, traces: {name: points}}, read from the Plotly graph divs
# (`data[i].x`: an array, or as Streamlit sends numbers, {dtype: 'f8', bdata: base64} with 8-byte elements).
# While a Streamlit fragment reruns (every second during training) the DOM also holds stale, zero-size copies
# of its elements: those are skipped. Queried afresh each poll.
VISIBLE_CHARTS_JS = """
() => {
    const length = x => !x ? 0 : (x.length !== undefined ? x.length
        : x.bdata ? atob(x.bdata).length / Number(x.dtype.slice(1)) : 0);
    return Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(chart => { const r = chart.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
        .filter(chart => !chart.closest('details:not([open])'))  // in a closed expander: not seen
        .map(chart => ({
            title: (chart.layout && chart.layout.title && chart.layout.title.text) || '',
            traces: Object.fromEntries((chart.data || []).map((t, i) => [t.name || `trace ${i}`, length(t.x)])),
        }));
}
"""
# The points of one trace (named `trace`, or `trace: …` as the ε legend adds each accountant's latest value) of
# the visible chart whose title contains `title` (0 while it is not drawn).
TRACE_POINTS_JS = f"""
([title, trace]) => Math.max(0, ...({VISIBLE_CHARTS_JS})()
    .filter(chart => chart.title.includes(title))
    .flatMap(chart => Object.entries(chart.traces)
        .filter(([name]) => name === trace || name.startsWith(trace + ': ')).map(([, points]) => points)))
"""
# [ε points, accuracy points] once both watched traces hold more points than `before` (a fragment rerun has
# drawn newer metrics), else null. Read in the same poll as the test: a later read may catch a redraw.
GAINED_JS = f"""
([before]) => {{
    const points = ([title, trace]) => ({TRACE_POINTS_JS})([title, trace]);
    const now = [points(["{EPSILON_TITLE}", "RDP (every step)"]), points(["{ACCURACY_TITLE}", "test set"])];
    return now[0] > before[0] && now[1] > before[1] ? now : null;
}}
"""
# Exactly the expected charts are visible, each with at least one point (the page is not mid-redraw).
ALL_DRAWN_JS = f"""
(titles) => {{
    const charts = ({VISIBLE_CHARTS_JS})();
    return charts.length === titles.length && titles.every(title => charts.some(
        chart => chart.title.includes(title) && Math.max(0, ...Object.values(chart.traces)) >= 1));
}}
"""


def _points(page: Page, title: str, trace: str) -> int:
    return int(page.evaluate(TRACE_POINTS_JS, [title, trace]))


def _watched_points(page: Page) -> tuple[int, int]:
    """(ε points of the RDP curve, test-accuracy points) as drawn now."""
    return _points(page, EPSILON_TITLE, "RDP (every step)"), _points(page, ACCURACY_TITLE, "test set")


def _wait_for_more_points(page: Page, before: tuple[int, int]) -> tuple[int, int]:
    """Until both watched traces have more points than `before`; returns the counts seen then."""
    handle = page.wait_for_function(GAINED_JS, arg=[list(before)], timeout=TIMEOUT_MS, polling=100)
    eps, accuracy = handle.json_value()
    return int(eps), int(accuracy)


def _wait_for_all_charts(page: Page) -> None:
    """Until the page is idle with the five charts drawn (call it once the run has ended)."""
    page.wait_for_function(helpers.IDLE_JS, timeout=TIMEOUT_MS, polling=100)
    page.wait_for_function(ALL_DRAWN_JS, arg=EXPECTED_TITLES, timeout=TIMEOUT_MS, polling=100)


def _run_id_from_url(url: str) -> str | None:
    match = re.search(r"[?&]run=([^&#]+)", url)
    return match.group(1) if match else None


def _status_heading(page: Page, run_id: str, status: str):
    return helpers.run_heading(page, run_id).filter(has_text=f"· {status}").first


@pytest.mark.browser
@pytest.mark.slow
def test_train_in_browser_charts_gain_points_while_training(tmp_path: Path, artifacts: Path) -> None:
    env, port = helpers.dashboard_env(tmp_path / "home"), free_port()
    worker_log, server_log = tmp_path / "worker.log", tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log, worker=worker_log)
    failure_png = helpers.fresh_artifact(artifacts, "browser-train-failure.png")
    console_errors = helpers.ConsoleErrors()
    with (
        helpers.process(helpers.WORKER_COMMAND, env=env, log=worker_log) as worker,
        helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail),
        helpers.chromium() as browser,
    ):
        # Tall enough for the whole page: Streamlit scrolls inside its own container, not the document.
        page = console_errors.watch(browser.new_page(viewport={"width": 1500, "height": 2000}, color_scheme="light"))
        try:
            page.goto(helpers.dashboard_url(port), wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            page.get_by_text("Train a differentially private model").wait_for(timeout=TIMEOUT_MS)
            epochs = page.get_by_role("spinbutton", name="Epochs")  # a typed number
            epochs.fill(str(LONG_EPOCHS))
            epochs.press("Enter")
            steps = steps_for(epochs=LONG_EPOCHS, n_train=DATASETS["digits"].n_train, lot_size=64)
            page.get_by_text(f"{steps:,}", exact=True).wait_for(timeout=TIMEOUT_MS)  # the plan followed
            page.get_by_role("button", name="Train", exact=True).click(timeout=TIMEOUT_MS)
            page.mouse.move(5, 5)  # off the button: its tooltip would cover the plan in the screenshots

            page.wait_for_function("() => location.search.includes('run=')", timeout=TIMEOUT_MS, polling=100)
            run_id = _run_id_from_url(page.url)
            assert run_id, f"no run= query parameter in {page.url}"
            training = _status_heading(page, run_id, "training")
            training.wait_for(timeout=TIMEOUT_MS)
            first = _wait_for_more_points(page, (2, 1))  # at least 3 ε points and 2 accuracy points
            training.wait_for(timeout=10_000)  # still training (tolerates a redraw of the heading)
            second = _wait_for_more_points(page, first)
            assert second[0] > first[0] and second[1] > first[1], (first, second)
            page.screenshot(path=artifacts / "browser-train-live.png", full_page=True)
            assert worker.poll() is None, "the worker exited while training"

            page.get_by_role("button", name="Cancel run").click(timeout=TIMEOUT_MS)
            _status_heading(page, run_id, "cancelled").wait_for(timeout=TIMEOUT_MS)
            _wait_for_all_charts(page)
            final = _watched_points(page)
            assert final[0] >= second[0] and final[1] >= second[1], (second, final)
            assert page.locator('[data-testid="stException"]').count() == 0
            assert page.get_by_role("button", name="Cancel run").count() == 0
            page.screenshot(path=artifacts / "browser-train.png", full_page=True)

            # The URL names the run: opened again (here in the dark theme), it shows the same run.
            dark = console_errors.watch(browser.new_page(viewport={"width": 1500, "height": 2000}, color_scheme="dark"))
            dark.goto(page.url, wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            _status_heading(dark, run_id, "cancelled").wait_for(timeout=TIMEOUT_MS)
            _wait_for_all_charts(dark)
            assert _run_id_from_url(dark.url) == run_id, f"run id lost on reload: {dark.url}"
            dark.screenshot(path=artifacts / "browser-train-dark.png", full_page=True)
        except Exception as exc:
            fail(
                helpers.failure_report(
                    exc, page, screenshot=failure_png, errors=console_errors, charts_js=VISIBLE_CHARTS_JS
                )
            )
    assert not console_errors, console_errors

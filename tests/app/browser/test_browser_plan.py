"""The Plan page in a real browser: open it from the navigation, move the target-ε slider with the keyboard, and
watch the calibrated σ and the chart follow, with no console error. No worker runs: planning never trains.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to the `artifacts` folder ($DPLAB_TEST_ARTIFACTS, else pytest's temporary folder; see conftest.py):
browser-plan.png (light theme), browser-plan-dark.png.
"""

from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests import browser_helpers as helpers
from tests.helpers import free_port

TIMEOUT_MS = 60_000
SIGMA_LABEL = "Noise multiplier σ"
# The ε chart shows one drawn line per applicable accountant (RDP, PLD, naive, advanced) and the target line.
CHART_DRAWN_JS = """
(minLines) => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(chart => { const r = chart.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
    .some(chart => (chart.querySelector('.gtitle') || {}).textContent?.includes('against epochs')
        && chart.querySelectorAll('g.scatterlayer path.js-line').length >= minLines)
"""


def metric_value(page: Page, label: str) -> str:
    metric = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return metric.locator('[data-testid="stMetricValue"]').inner_text().strip()


def wait_until_settled(page: Page) -> None:
    """Until the script run is over and the ε chart is drawn."""
    page.wait_for_function(helpers.IDLE_JS, timeout=TIMEOUT_MS, polling=100)
    page.wait_for_function(CHART_DRAWN_JS, arg=4, timeout=TIMEOUT_MS, polling=100)


@pytest.mark.browser
@pytest.mark.slow
def test_plan_page_follows_the_epsilon_slider_without_console_errors(tmp_path: Path, artifacts: Path) -> None:
    env, port, server_log = helpers.dashboard_env(tmp_path / "home"), free_port(), tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log)
    failure_png = helpers.fresh_artifact(artifacts, "browser-plan-failure.png")
    console_errors = helpers.ConsoleErrors()
    with helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail), helpers.chromium() as browser:
        # Tall enough for the whole page: Streamlit scrolls inside its own container, not the document.
        page = console_errors.watch(browser.new_page(viewport={"width": 1500, "height": 1900}, color_scheme="light"))
        try:
            page.goto(helpers.dashboard_url(port), wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            page.get_by_role("link", name="Plan").click(timeout=TIMEOUT_MS)
            page.get_by_text("Plan a private training run").wait_for(timeout=TIMEOUT_MS)
            wait_until_settled(page)
            sigma_before = metric_value(page, SIGMA_LABEL)
            assert page.get_by_text("target ε = 3", exact=True).count() == 1

            slider = page.get_by_role("slider", name="Target ε")
            slider.focus()
            page.keyboard.press("ArrowRight")  # 3.0 → 4.0 on the log-spaced scale
            page.wait_for_function(
                "([label, before]) => Array.from(document.querySelectorAll('[data-testid=\"stMetric\"]'))"
                ".some(m => m.textContent.includes(label) && !m.textContent.includes(before))",
                arg=[SIGMA_LABEL, sigma_before],
                timeout=TIMEOUT_MS,
                polling=100,
            )
            wait_until_settled(page)
            sigma_after = metric_value(page, SIGMA_LABEL)
            assert slider.get_attribute("aria-valuetext") == "4.0"
            assert float(sigma_after) < float(sigma_before), (sigma_before, sigma_after)  # more ε, less noise
            page.get_by_text("target ε = 4", exact=True).wait_for(timeout=TIMEOUT_MS)  # the chart followed
            assert page.locator('[data-testid="stException"]').count() == 0
            page.screenshot(path=artifacts / "browser-plan.png", full_page=True)
            page.set_viewport_size({"width": 800, "height": 1800})  # a narrow window: columns stack, labels wrap
            page.wait_for_timeout(500)
            assert page.locator('[data-testid="stException"]').count() == 0
            page.screenshot(path=artifacts / "browser-plan-800.png", full_page=True)
            page.set_viewport_size({"width": 1400, "height": 1800})

            page.emulate_media(color_scheme="dark")  # Streamlit follows the system theme by default
            page.wait_for_timeout(500)
            page.screenshot(path=artifacts / "browser-plan-dark.png", full_page=True)
        except Exception as exc:
            fail(helpers.failure_report(exc, page, screenshot=failure_png, errors=console_errors))
    assert not console_errors, console_errors

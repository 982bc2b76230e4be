"""The Train form in a real browser: a number typed out of range is the number the page judges (an input with its
own bounds would turn red and keep planning the older value), the engine's reason appears under the field at once
and Train is disabled; the value typed on Train is where the Plan and Sweep pages start.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to the `artifacts` folder ($DPLAB_TEST_ARTIFACTS, else pytest's temporary folder).
"""

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests import browser_helpers as helpers
from tests.helpers import free_port

TIMEOUT_MS = 90_000


def settle(page: Page) -> None:
    page.wait_for_function(helpers.IDLE_JS, timeout=TIMEOUT_MS, polling=100)


def type_number(page: Page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    box.fill(value)
    box.press("Enter")
    settle(page)


def go_to(page: Page, link: str, title: str) -> None:
    page.get_by_role("link", name=link, exact=True).click(timeout=TIMEOUT_MS)
    page.get_by_text(title).first.wait_for(timeout=TIMEOUT_MS)
    settle(page)


@pytest.mark.browser
@pytest.mark.slow
def test_a_typed_epsilon_is_judged_by_the_engine_and_shared_with_plan_and_sweep(tmp_path: Path, artifacts: Path):
    env, port, server_log = helpers.dashboard_env(tmp_path / "home"), free_port(), tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log)
    errors = helpers.ConsoleErrors()
    with helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail), helpers.chromium() as browser:
        page = errors.watch(browser.new_page(viewport={"width": 1400, "height": 1800}, color_scheme="light"))
        try:
            page.goto(helpers.dashboard_url(port), wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            page.get_by_text("Train a differentially private model").wait_for(timeout=TIMEOUT_MS)
            settle(page)
            sidebar = page.locator('[data-testid="stSidebar"]')
            train = page.get_by_role("button", name="Train", exact=True)
            expect(train).to_be_enabled(timeout=TIMEOUT_MS)

            type_number(page, "Target ε", "500")
            reason = sidebar.locator('[data-testid="stAlertContentError"]')
            expect(reason).to_contain_text("Target ε: must be a number in [0.01, 100], got 500", timeout=TIMEOUT_MS)
            expect(train).to_be_disabled(timeout=TIMEOUT_MS)
            assert page.get_by_text("ε after training (RDP)").count() == 0  # no plan of an older ε
            page.screenshot(path=artifacts / "browser-forms-refused.png", full_page=True)

            type_number(page, "Target ε", "0.8")
            expect(reason).to_have_count(0, timeout=TIMEOUT_MS)
            expect(train).to_be_enabled(timeout=TIMEOUT_MS)
            go_to(page, "Plan", "Plan a private training run")
            expect(page.get_by_role("slider", name="Target ε")).to_have_attribute(
                "aria-valuetext", "0.8", timeout=TIMEOUT_MS
            )
            go_to(page, "Sweep", "Design a sweep")
            expect(page.get_by_role("spinbutton", name="Target ε", exact=True)).to_have_value("0.8")
        except Exception as exc:
            fail(helpers.failure_report(exc, page, screenshot=artifacts / "browser-forms-failure.png", errors=errors))
    assert not errors, errors

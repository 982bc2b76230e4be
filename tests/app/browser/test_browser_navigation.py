"""The dashboard an analyst never loses work in, in a real browser: the Train form survives a page switch and a
reload, a link opens the run and the configuration it names, uploads are called by the name the user gave them,
"Train this plan" and "Sweep around this run" carry a configuration across pages, a click on a row of the Runs
table opens that run and names it in the URL, and a training sweep shows its running runs' progress.

The store is prepared in-process before the server starts (a saved CSV upload, two tiny finished runs); only the
sweep test starts a worker. Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium.
Screenshots go to the `artifacts` folder ($DPLAB_TEST_ARTIFACTS, else pytest's temporary folder).
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, Page, expect

from app.services import uploads
from cache import Store
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests import browser_helpers as helpers
from tests.helpers import cli, fast_spec, free_port, synthetic_csv, synthetic_schema

TIMEOUT_MS = 60_000
UPLOAD_LABEL = "Clinic survey (synthetic)"
SCHEMA = synthetic_schema()


@pytest.fixture(scope="module")
def prepared_home(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A data home with a saved upload and two finished one-epoch runs (digits, the upload); their ids by name."""
    home = tmp_path_factory.mktemp("navigation") / "home"
    saved = uploads.save_upload(
        home, file_name="people.csv", data=synthetic_csv(), raw_schema=SCHEMA, label=UPLOAD_LABEL
    )
    store = Store(home / "runs.sqlite3")
    digits = submit(store, parse_spec(fast_spec(epochs=1))).run_id
    csv_spec = {"dataset": saved.dataset, "schema": saved.schema, "model": "logreg", "algorithm": "dpsgd"}
    csv_spec |= {"target_epsilon": 3.0, "delta": 1e-4, "clip_norm": 1.0, "lot_size": 32, "epochs": 1, "lr": 1.0}
    csv_spec["seed"] = 0
    upload_run = submit(store, parse_spec(csv_spec)).run_id
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    return home, {"digits": digits, "upload": upload_run}


@pytest.fixture(scope="module")
def dashboard(prepared_home, tmp_path_factory) -> Iterator[tuple[Browser, int, helpers.Fail]]:
    home, _ = prepared_home
    env, port = helpers.dashboard_env(home), free_port()
    server_log = tmp_path_factory.mktemp("navigation-logs") / "server.log"
    fail = helpers.failing_with_logs(server=server_log)
    with helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail), helpers.chromium() as browser:
        yield browser, port, fail


def open_page(browser: Browser, url: str, errors: helpers.ConsoleErrors, *, width: int = 1400) -> Page:
    page = errors.watch(browser.new_page(viewport={"width": width, "height": 1800}, color_scheme="light"))
    page.goto(url, wait_until="domcontentloaded", timeout=TIMEOUT_MS)
    settle(page)
    return page


def settle(page: Page) -> None:
    page.wait_for_function(helpers.IDLE_JS, timeout=TIMEOUT_MS, polling=100)


def number(page: Page, label: str):
    return page.get_by_role("spinbutton", name=label, exact=True)


def type_number(page: Page, label: str, value: str) -> None:
    box = number(page, label)
    box.fill(value)
    box.press("Enter")
    settle(page)


def go_to(page: Page, link: str) -> None:
    page.get_by_role("link", name=link, exact=True).click(timeout=TIMEOUT_MS)
    settle(page)


def query(page: Page) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlparse(page.url).query).items()}


@pytest.mark.browser
@pytest.mark.slow
def test_the_train_form_survives_a_page_switch_and_a_reload(dashboard, artifacts: Path) -> None:
    browser, port, fail = dashboard
    errors = helpers.ConsoleErrors()
    page = open_page(browser, helpers.dashboard_url(port), errors)
    try:
        type_number(page, "Target ε", "0.8")  # any value in range, not one of a slider's stops
        type_number(page, "Epochs", "7")
        go_to(page, "Plan")
        page.get_by_text("Plan a private training run").wait_for(timeout=TIMEOUT_MS)
        go_to(page, "Train")
        expect(number(page, "Target ε")).to_have_value("0.8", timeout=TIMEOUT_MS)
        expect(number(page, "Epochs")).to_have_value("7", timeout=TIMEOUT_MS)
        assert page.get_by_text("Changed from this preset").count() == 1  # not the preset's stale description
        page.reload(wait_until="domcontentloaded")
        page.get_by_text("Train a differentially private model").wait_for(timeout=TIMEOUT_MS)
        settle(page)
        expect(number(page, "Target ε")).to_have_value("0.8", timeout=TIMEOUT_MS)
        expect(number(page, "Epochs")).to_have_value("7", timeout=TIMEOUT_MS)
        page.screenshot(path=artifacts / "browser-train-form-kept.png", full_page=True)
    except Exception as exc:
        fail(helpers.failure_report(exc, page, screenshot=artifacts / "browser-form-failure.png", errors=errors))
    assert not errors, errors


@pytest.mark.browser
@pytest.mark.slow
def test_a_link_to_a_run_opens_its_configuration_and_names_the_upload_as_the_user_did(
    prepared_home, dashboard, artifacts: Path
) -> None:
    _, runs = prepared_home
    browser, port, fail = dashboard
    errors = helpers.ConsoleErrors()
    page = open_page(browser, f"{helpers.dashboard_url(port)}?run={runs['upload']}", errors)
    try:
        helpers.run_heading(page, runs["upload"]).first.wait_for(timeout=TIMEOUT_MS)
        shown = page.locator('[data-testid="stSidebar"] input').evaluate_all("inputs => inputs.map(i => i.value)")
        assert f"{UPLOAD_LABEL} (your upload)" in shown, shown  # the form shows the run's dataset, by its label
        expect(number(page, "Lot size L")).to_have_value("32", timeout=TIMEOUT_MS)
        assert page.get_by_text(f"The configuration of run {runs['upload']}.").count() == 1
        assert page.get_by_text("describes another configuration").count() == 0  # form and run agree
        text = page.locator('[data-testid="stMain"]').inner_text()
        assert UPLOAD_LABEL in text and "csv:" not in text and ".csv" not in text
        page.screenshot(path=artifacts / "browser-run-link.png", full_page=True)

        go_to(page, "Runs")
        page.get_by_text("All runs").wait_for(timeout=TIMEOUT_MS)
        text = page.locator('[data-testid="stMain"]').inner_text()
        assert UPLOAD_LABEL in text and "csv:" not in text and ".csv" not in text
        go_to(page, "Compare")
        page.get_by_text("Compare runs").first.wait_for(timeout=TIMEOUT_MS)
        page.get_by_role("combobox").first.click()  # the Dataset filter's options
        options = page.get_by_role("option").all_inner_texts()
        assert UPLOAD_LABEL in options and not any("csv" in option for option in options), options
    except Exception as exc:
        fail(helpers.failure_report(exc, page, screenshot=artifacts / "browser-link-failure.png", errors=errors))
    assert not errors, errors


@pytest.mark.browser
@pytest.mark.slow
def test_train_this_plan_and_sweep_around_this_run_carry_the_configuration(
    prepared_home, dashboard, artifacts: Path
) -> None:
    _, runs = prepared_home
    browser, port, fail = dashboard
    errors = helpers.ConsoleErrors()
    page = open_page(browser, helpers.dashboard_url(port), errors)
    try:
        go_to(page, "Plan")
        page.get_by_role("slider", name="Epochs").focus()
        page.keyboard.press("ArrowRight")  # 20 → 21 epochs
        settle(page)
        page.get_by_role("button", name="Train this plan").click(timeout=TIMEOUT_MS)
        page.get_by_text("Train a differentially private model").wait_for(timeout=TIMEOUT_MS)
        settle(page)
        expect(number(page, "Epochs")).to_have_value("21", timeout=TIMEOUT_MS)
        assert page.get_by_text("Carried from the Plan page.").count() == 1

        page.goto(f"{helpers.dashboard_url(port)}?run={runs['digits']}", wait_until="domcontentloaded")
        settle(page)
        page.get_by_role("button", name="Sweep around this run").click(timeout=TIMEOUT_MS)
        page.get_by_text(f"Base configuration from run {runs['digits']}.").wait_for(timeout=TIMEOUT_MS)
        settle(page)
        assert float(number(page, "Epochs").input_value()) == 1.0  # the run's one epoch, not the default 10
        expect(number(page, "Lot size L")).to_have_value("64", timeout=TIMEOUT_MS)
        page.screenshot(path=artifacts / "browser-sweep-around.png", full_page=True)
    except Exception as exc:
        fail(helpers.failure_report(exc, page, screenshot=artifacts / "browser-carry-failure.png", errors=errors))
    assert not errors, errors


@pytest.mark.browser
@pytest.mark.slow
def test_a_click_on_a_row_of_the_runs_table_opens_that_run_and_the_url_names_it(
    prepared_home, dashboard, artifacts: Path
) -> None:
    _, runs = prepared_home
    browser, port, fail = dashboard
    errors = helpers.ConsoleErrors()
    page = open_page(browser, helpers.dashboard_url(port), errors)
    try:
        go_to(page, "Runs")
        grid = page.locator('.st-key-runs-list [data-testid="stDataFrame"]')
        grid.wait_for(timeout=TIMEOUT_MS)
        box = grid.bounding_box()
        row_height, header = 35, 35  # glide data grid's defaults in Streamlit
        second_row = box["y"] + header + 1.5 * row_height  # newest first: the first run submitted is second
        page.mouse.click(box["x"] + 20, second_row)  # the row marker column selects the row
        page.wait_for_function(
            "(id) => location.search.includes('run=' + id)", arg=runs["digits"], timeout=TIMEOUT_MS, polling=100
        )
        settle(page)
        helpers.run_heading(page, runs["digits"]).first.wait_for(timeout=TIMEOUT_MS)
        shared = page.url
        deep_link = helpers.ConsoleErrors()  # Streamlit probes <page>/_stcore/… first on a page's URL (404)
        other = open_page(browser, shared, deep_link)  # the link opens the same run on the Runs page
        helpers.run_heading(other, runs["digits"]).first.wait_for(timeout=TIMEOUT_MS)
        assert query(other)["run"] == runs["digits"]
        other.screenshot(path=artifacts / "browser-runs-row-click.png", full_page=True)
        assert not [e for e in deep_link if "/_stcore/" not in e], deep_link
    except Exception as exc:
        fail(helpers.failure_report(exc, page, screenshot=artifacts / "browser-rows-failure.png", errors=errors))
    assert not errors, errors


# The sweep frontier with open markers drawn: its runs still training, at their ε and test accuracy so far.
RUNNING_MARKERS_JS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(chart =>
    /Privacy–utility frontier/.test((chart.querySelector('.gtitle') || {}).textContent || '')
    && chart.querySelectorAll('g.scatterlayer path.point').length >= 1)
"""


@pytest.mark.browser
@pytest.mark.slow
def test_a_training_sweep_shows_its_running_runs_progress(dashboard, tmp_path: Path, artifacts: Path) -> None:
    browser, _, _ = dashboard  # one Playwright per module: this test starts its own server and worker
    home = tmp_path / "home"
    env, port = helpers.dashboard_env(home), free_port()
    worker_log, server_log = tmp_path / "worker.log", tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log, worker=worker_log)
    grid = tmp_path / "grid.json"
    base = fast_spec(epochs=300)  # thousands of steps: far longer than the test watches
    grid.write_text(json.dumps({"base": base, "grid": {"lr": [1.0, 2.0]}, "seeds": [0], "name": "long sweep"}))
    cli(home, "sweep", str(grid))
    errors = helpers.ConsoleErrors()
    with (
        helpers.process(helpers.WORKER_COMMAND, env=env, log=worker_log),
        helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail),
    ):
        page = open_page(browser, helpers.dashboard_url(port), errors)
        try:
            go_to(page, "Sweep")
            page.get_by_text(re.compile(r"running run\(s\) show their ε so far")).wait_for(timeout=TIMEOUT_MS)
            page.get_by_text(re.compile(r"[\d,]+ / [\d,]+ steps · about [\d a-z]+ left")).wait_for(timeout=TIMEOUT_MS)
            page.wait_for_function(RUNNING_MARKERS_JS, timeout=TIMEOUT_MS)  # the frontier draws them so far
            page.screenshot(path=artifacts / "browser-sweep-live.png", full_page=True)
            page.get_by_role("button", name=re.compile("Cancel the 2 unfinished runs")).click(timeout=TIMEOUT_MS)
        except Exception as exc:
            fail(helpers.failure_report(exc, page, screenshot=artifacts / "browser-sweep-failure.png", errors=errors))
    assert not errors, errors

"""What the browser tests share: the dashboard (and a worker) as subprocesses on a fresh data home, waiting for
the server's health check, headless Chromium, console errors collected from every page, and failure reports
that carry the server's (and the worker's) log. Screenshots go to the `artifacts` fixture's folder (conftest.py:
$DPLAB_TEST_ARTIFACTS, else a temporary folder), never into the repository.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
"""

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NoReturn

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.helpers import ROOT, home_env, stop_process

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HEALTH_TIMEOUT_S = 60
WORKER_COMMAND = [sys.executable, "-m", "engine", "worker"]
# The script run is over and no element is stale (faded, left over from the previous run).
IDLE_JS = """
() => document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-stale="true"]')
"""

Fail = Callable[[str], NoReturn]


def dashboard_env(home: Path) -> dict[str, str]:
    """This environment with `home` as the data home and the repository importable."""
    return home_env(home, PYTHONUNBUFFERED="1")


def dashboard_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def streamlit_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app/main.py",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]


def fresh_artifact(artifacts: Path, name: str) -> Path:
    """The path of screenshot `name` in the folder `artifacts`, with no file left there by an earlier run."""
    artifacts.mkdir(parents=True, exist_ok=True)
    path = artifacts / name
    path.unlink(missing_ok=True)
    return path


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


def failing_with_logs(**logs: Path) -> Fail:
    """A function that fails the test with its message and the tail of each log (named by its keyword)."""

    def fail(message: str) -> NoReturn:
        sections = "".join(f"\n\n--- {name} log ({path}) ---\n{tail(path)}" for name, path in logs.items())
        pytest.fail(f"{message}{sections}", pytrace=False)

    return fail


@contextmanager
def process(args: list[str], *, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """Run `args` from the repository root with output to `log`; always stop it (SIGTERM, then kill)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            stop_process(proc)


def wait_healthy(port: int, server: subprocess.Popen, fail: Fail) -> None:
    health = f"{dashboard_url(port)}_stcore/health"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if server.poll() is not None:
            fail(f"the Streamlit server exited with status {server.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(health, timeout=2) as response:
                body = response.read().decode(errors="replace").strip()
            if response.status == 200 and body == "ok":
                return
            last_error = f"HTTP {response.status}: {body!r}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.25)
    fail(f"{health} did not answer 'ok' within {HEALTH_TIMEOUT_S} s (last: {last_error})")


@contextmanager
def healthy_dashboard(port: int, *, env: dict[str, str], log: Path, fail: Fail) -> Iterator[subprocess.Popen]:
    """The Streamlit dashboard serving on `port`, once its health check answers."""
    with process(streamlit_command(port), env=env, log=log) as server:
        wait_healthy(port, server, fail)
        yield server


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Debian Chromium, closed afterwards."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class ConsoleErrors(list[str]):
    """The console errors and uncaught exceptions of every page it watches."""

    def watch(self, page: Page) -> Page:
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.append(f"uncaught: {exc}"))
        return page

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.append(f"{message.text} ({message.location.get('url', '')})")


def failure_report(exc: Exception, page: Page, *, screenshot: Path, errors: ConsoleErrors, charts_js: str = "") -> str:
    """What went wrong, for `fail`: the exception, the page's URL, its charts (read by `charts_js`, if given), the
    console errors, and where the screenshots are; one of the page is saved to `screenshot` where it can be taken."""
    charts = "unknown"
    if charts_js:
        with suppress(Exception):
            charts = page.evaluate(charts_js)
    shot = f"no screenshot could be taken; other screenshots in {screenshot.parent}"
    with suppress(Exception):
        page.screenshot(path=screenshot, full_page=True)
        shot = f"screenshot: {screenshot}; others in {screenshot.parent}"
    seen = f"visible charts: {charts}; " if charts_js else ""
    return f"{type(exc).__name__}: {exc}\n(page URL: {page.url}; {seen}console errors: {errors})\n({shot})"


def run_heading(page: Page, run_id: str):
    """The run panel's title of run `run_id`: it reads the run's name; the id is its anchor."""
    return page.locator(f"h3#run-{run_id}")

"""End to end in a real browser: start a worker and the Streamlit dashboard on a fresh data home, press
Train in headless Chromium, and watch the ε chart fill in; the run survives a page reload.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to test-artifacts/ (git-ignored) under the repository root.
"""

import os
import re
import signal
import socket
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
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
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
CHART_TIMEOUT_S = 90
EPSILON_TITLE = "Cumulative privacy loss"
MIN_SEGMENTS = 3

EXPECTED_TITLES = ["Test accuracy", "Training loss", EPSILON_TITLE]

# The charts a user can see, each as {title, segments}: `segments` counts the "L" commands of the
# chart's longest trace path. While a Streamlit fragment reruns (every second during training) the
# DOM also holds stale, zero-size copies of its elements: those are skipped. Queried afresh each poll.
VISIBLE_CHARTS_JS = """
() => Array.from(document.querySelectorAll('.stPlotlyChart .js-plotly-plot, .js-plotly-plot'))
    .filter((chart, i, all) => all.indexOf(chart) === i)
    .filter(chart => { const r = chart.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
    .map(chart => ({
        title: (chart.querySelector('.gtitle') || {}).textContent || '',
        segments: Math.max(0, ...Array.from(chart.querySelectorAll('g.scatterlayer path.js-line'))
            .map(path => ((path.getAttribute('d') || '').match(/L/g) || []).length)),
    }))
"""
# The ε chart's trace is drawn with at least `minSegments` line segments.
EPSILON_DRAWN_JS = f"""
([title, minSegments]) => ({VISIBLE_CHARTS_JS})()
    .some(chart => chart.title.includes(title) && chart.segments >= minSegments)
"""
# Exactly the expected charts are visible and each has a drawn line (the page is not mid-redraw).
ALL_DRAWN_JS = f"""
(titles) => {{
    const charts = ({VISIBLE_CHARTS_JS})();
    return charts.length === titles.length
        && titles.every(title => charts.some(chart => chart.title.includes(title) && chart.segments >= 1));
}}
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


@contextmanager
def _process(args: list[str], *, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """Run `args` from the repository root with output to `log`; always stop it (SIGTERM, then kill)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_healthy(port: int, server: subprocess.Popen, fail: Callable[[str], NoReturn]) -> None:
    url = f"http://127.0.0.1:{port}/_stcore/health"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if server.poll() is not None:
            fail(f"the Streamlit server exited with status {server.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body = response.read().decode(errors="replace").strip()
            if response.status == 200 and body == "ok":
                return
            last_error = f"HTTP {response.status}: {body!r}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.25)
    fail(f"{url} did not answer 'ok' within {HEALTH_TIMEOUT_S} s (last: {last_error})")


def _wait_for_epsilon_line(page: Page) -> None:
    page.wait_for_function(
        EPSILON_DRAWN_JS, arg=[EPSILON_TITLE, MIN_SEGMENTS], timeout=CHART_TIMEOUT_S * 1000, polling=250
    )


def _wait_for_all_charts(page: Page) -> None:
    """Until the three charts are drawn at once; at the latest when the run ends and polling stops."""
    page.wait_for_function(ALL_DRAWN_JS, arg=EXPECTED_TITLES, timeout=CHART_TIMEOUT_S * 1000, polling=100)


def _run_id_from_url(url: str) -> str | None:
    match = re.search(r"[?&]run=([^&#]+)", url)
    return match.group(1) if match else None


def test_train_in_browser_plots_epsilon_and_survives_reload(tmp_path: Path) -> None:
    env = os.environ.copy()
    env["DPLAB_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    port = _free_port()
    worker_log, server_log = tmp_path / "worker.log", tmp_path / "server.log"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "browser-train-failure.png").unlink(missing_ok=True)

    def fail(message: str) -> NoReturn:
        pytest.fail(
            f"{message}\n\n--- server log ({server_log}) ---\n{_tail(server_log)}"
            f"\n\n--- worker log ({worker_log}) ---\n{_tail(worker_log)}",
            pytrace=False,
        )

    worker_cmd = [sys.executable, "-m", "engine", "worker"]
    server_cmd = [
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
    with (
        _process(worker_cmd, env=env, log=worker_log) as worker,
        _process(server_cmd, env=env, log=server_log) as server,
    ):
        _wait_healthy(port, server, fail)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1100})
                try:
                    page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded", timeout=60_000)
                    page.get_by_text("Train a differentially private model").wait_for(timeout=60_000)
                    page.get_by_role("button", name="Train", exact=True).click(timeout=30_000)

                    _wait_for_epsilon_line(page)
                    _wait_for_all_charts(page)
                    page.screenshot(path=ARTIFACTS / "browser-train-epsilon.png", full_page=True)

                    run_id = _run_id_from_url(page.url)
                    assert run_id, f"no run= query parameter in {page.url}"
                    assert worker.poll() is None, "the worker exited while training"

                    page.reload(wait_until="domcontentloaded", timeout=60_000)
                    assert _run_id_from_url(page.url) == run_id, f"run id lost on reload: {page.url}"
                    heading = page.locator("h3", has_text=run_id).filter(has_text="Run ")
                    heading.first.wait_for(timeout=60_000)
                    _wait_for_epsilon_line(page)
                    _wait_for_all_charts(page)
                    page.screenshot(path=ARTIFACTS / "browser-train.png", full_page=True)
                except Exception as exc:
                    charts = "unknown"
                    with suppress(Exception):
                        charts = page.evaluate(VISIBLE_CHARTS_JS)
                    with suppress(Exception):
                        page.screenshot(path=ARTIFACTS / "browser-train-failure.png", full_page=True)
                    fail(f"{type(exc).__name__}: {exc}\n(page URL: {page.url}; visible charts: {charts})")
            finally:
                browser.close()

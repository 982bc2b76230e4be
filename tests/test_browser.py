"""End to end in a real browser: start a worker and the Streamlit dashboard on a fresh data home, stretch the
fast digits demo to 400 epochs with the keyboard, press Train in headless Chromium, and check that the ε and
accuracy charts gain points while the run trains; then cancel it, and see the cancelled run with all four
charts, also when its URL is opened again (in the dark theme); no browser console error throughout.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to test-artifacts/ (git-ignored) under the repository root: browser-train-live.png (while
training), browser-train.png (cancelled, light theme), browser-train-dark.png (the reopened URL, dark theme).
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
from playwright.sync_api import ConsoleMessage, Page, sync_playwright

from engine.training import DATASETS
from engine.training.plan import steps_for

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
TIMEOUT_MS = 90_000
EPSILON_TITLE = "Cumulative privacy loss"
ACCURACY_TITLE = "Accuracy"
DIAGNOSTICS_TITLE = "Private diagnostics"
EXPECTED_TITLES = [ACCURACY_TITLE, EPSILON_TITLE, "Training loss", DIAGNOSTICS_TITLE]
LONG_EPOCHS = 400  # the slider's end: 9,000 digits steps, far more than the test watches before it cancels

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
        .map(chart => ({
            title: (chart.layout && chart.layout.title && chart.layout.title.text) || '',
            traces: Object.fromEntries((chart.data || []).map((t, i) => [t.name || `trace ${i}`, length(t.x)])),
        }));
}
"""
# The points of one trace of the visible chart whose title contains `title` (0 while it is not drawn).
TRACE_POINTS_JS = f"""
([title, trace]) => Math.max(0, ...({VISIBLE_CHARTS_JS})()
    .filter(chart => chart.title.includes(title)).map(chart => chart.traces[trace] || 0))
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
# The script run is over and no element is stale (faded, left over from the previous run); only once a run has
# ended, as the live view reruns every second while it trains.
IDLE_JS = """
() => document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-stale="true"]')
"""
# Exactly the expected charts are visible, each with at least one point (the page is not mid-redraw).
ALL_DRAWN_JS = f"""
(titles) => {{
    const charts = ({VISIBLE_CHARTS_JS})();
    return charts.length === titles.length && titles.every(title => charts.some(
        chart => chart.title.includes(title) && Math.max(0, ...Object.values(chart.traces)) >= 1));
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
    """Until the page is idle with the four charts drawn (call it once the run has ended)."""
    page.wait_for_function(IDLE_JS, timeout=TIMEOUT_MS, polling=100)
    page.wait_for_function(ALL_DRAWN_JS, arg=EXPECTED_TITLES, timeout=TIMEOUT_MS, polling=100)


def _run_id_from_url(url: str) -> str | None:
    match = re.search(r"[?&]run=([^&#]+)", url)
    return match.group(1) if match else None


def _status_heading(page: Page, run_id: str, status: str):
    return page.locator("h3", has_text=run_id).filter(has_text=f"· {status}").first


def test_train_in_browser_charts_gain_points_while_training(tmp_path: Path) -> None:
    env = os.environ.copy()
    env["DPLAB_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    port = _free_port()
    worker_log, server_log = tmp_path / "worker.log", tmp_path / "server.log"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "browser-train-failure.png").unlink(missing_ok=True)
    console_errors: list[str] = []

    def fail(message: str) -> NoReturn:
        pytest.fail(
            f"{message}\n\n--- server log ({server_log}) ---\n{_tail(server_log)}"
            f"\n\n--- worker log ({worker_log}) ---\n{_tail(worker_log)}",
            pytrace=False,
        )

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            console_errors.append(f"{message.text} ({message.location.get('url', '')})")

    worker_cmd = [sys.executable, "-m", "engine", "worker"]
    server_cmd = [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.address", "127.0.0.1",
                  "--server.port", str(port), "--server.headless", "true",
                  "--browser.gatherUsageStats", "false"]  # fmt: skip
    with (
        _process(worker_cmd, env=env, log=worker_log) as worker,
        _process(server_cmd, env=env, log=server_log) as server,
    ):
        _wait_healthy(port, server, fail)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                # Tall enough for the whole page: Streamlit scrolls inside its own container, not the document.
                page = browser.new_page(viewport={"width": 1500, "height": 2000}, color_scheme="light")
                page.on("console", on_console)
                page.on("pageerror", lambda exc: console_errors.append(f"uncaught: {exc}"))
                try:
                    page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded", timeout=TIMEOUT_MS)
                    page.get_by_text("Train a differentially private model").wait_for(timeout=TIMEOUT_MS)
                    page.get_by_role("slider", name="Epochs").focus()
                    page.keyboard.press("End")
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
                    page.screenshot(path=ARTIFACTS / "browser-train-live.png", full_page=True)
                    assert worker.poll() is None, "the worker exited while training"

                    page.get_by_role("button", name="Cancel run").click(timeout=TIMEOUT_MS)
                    _status_heading(page, run_id, "cancelled").wait_for(timeout=TIMEOUT_MS)
                    _wait_for_all_charts(page)
                    final = _watched_points(page)
                    assert final[0] >= second[0] and final[1] >= second[1], (second, final)
                    assert page.locator('[data-testid="stException"]').count() == 0
                    assert page.get_by_role("button", name="Cancel run").count() == 0
                    page.screenshot(path=ARTIFACTS / "browser-train.png", full_page=True)

                    # The URL names the run: opened again (here in the dark theme), it shows the same run.
                    dark = browser.new_page(viewport={"width": 1500, "height": 2000}, color_scheme="dark")
                    dark.on("console", on_console)
                    dark.on("pageerror", lambda exc: console_errors.append(f"uncaught: {exc}"))
                    dark.goto(page.url, wait_until="domcontentloaded", timeout=TIMEOUT_MS)
                    _status_heading(dark, run_id, "cancelled").wait_for(timeout=TIMEOUT_MS)
                    _wait_for_all_charts(dark)
                    assert _run_id_from_url(dark.url) == run_id, f"run id lost on reload: {dark.url}"
                    dark.screenshot(path=ARTIFACTS / "browser-train-dark.png", full_page=True)
                except Exception as exc:
                    charts = "unknown"
                    with suppress(Exception):
                        charts = page.evaluate(VISIBLE_CHARTS_JS)
                    with suppress(Exception):
                        page.screenshot(path=ARTIFACTS / "browser-train-failure.png", full_page=True)
                    fail(f"{type(exc).__name__}: {exc}\n(page URL: {page.url}; visible charts: {charts}; "
                         f"console errors: {console_errors})")  # fmt: skip
            finally:
                browser.close()
    assert not console_errors, console_errors

"""Dashboard latency: press Train in a real browser → the run's first training step plotted.

Starts what `make run` starts (a worker pool and the Streamlit server) on a fresh data home, opens
the Train page in Debian's Chromium (Playwright), presses **Train** on the default preset (digits), and on
MNIST and Adult through the page's `?config=` link (skipped when their files are not here), and times
until the ε or the training-loss chart of the run draws a line (step 0 and a training step; the accuracy
at step 0 alone does not count). Each repetition uses a fresh data home (no cache hit) and a fresh worker,
timed once it has warmed up and registered, as under `make run`: warming up loads the datasets whose files
are here (`engine.jobs.workers.datasets`), so what is timed is queueing, claiming, planning, the first step,
storing it and drawing it.
"""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from cache import Store
from engine.jobs.settings import default_data_dirs
from engine.training.config.examples import digits_demo_spec
from engine.training.datasets import DATASETS

# The Train form as each timed press finds it: the default preset (digits), then MNIST and Adult through the
# page's `?config=` link (logistic regression, ε = 3, lots of 256).
CONFIGS: dict[str, dict | None] = {
    "digits": None,
    "mnist": digits_demo_spec(dataset="mnist", lot_size=256, lr=1.0),
    "adult": digits_demo_spec(dataset="adult", lot_size=256, lr=1.0),
}

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# A visible ε or training-loss chart of the run panel with a line drawn (two points or more: a training step).
POINT_DRAWN_JS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(chart => {
    const r = chart.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return false;
    const title = (chart.querySelector('.gtitle') || {}).textContent || '';
    if (!/Cumulative privacy loss|Training loss/.test(title)) return false;
    return Array.from(chart.querySelectorAll('g.scatterlayer path.js-line'))
        .some(path => (path.getAttribute('d') || '').startsWith('M'));
})
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def _one_press(playwright, config: dict | None) -> float:
    """Seconds from pressing Train to the first drawn point of the run, the form filled from `config` (a raw
    spec in the Train page's `?config=` link; None: the default preset)."""
    home = Path(tempfile.mkdtemp(prefix="dplab-bench-"))
    port = _free_port()
    env = {**os.environ, "DPLAB_HOME": str(home), "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "engine", "worker", "--workers", "1", "--poll", "0.1"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app/main.py",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--server.headless",
                "true",
                "--browser.gatherUsageStats",
                "false",
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ),
    ]
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
    try:
        _wait(lambda: _healthy(port), 90, "the dashboard")
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        link = f"?config={urllib.parse.quote(json.dumps(config))}" if config else ""
        page.goto(f"http://127.0.0.1:{port}/{link}", wait_until="networkidle")
        button = page.get_by_role("button", name="Train", exact=True)
        button.wait_for(timeout=60_000)
        store = Store(home / "runs.sqlite3")
        _wait(lambda: store.list_workers(), 90, "the worker to register")  # `make run`'s steady state
        time.sleep(1.0)
        clicked = time.time()
        button.click()
        stored = _first_metric_time(store)  # while the page draws: when the worker's first point reached the store
        page.wait_for_function(POINT_DRAWN_JS, timeout=90_000, polling=50)
        drawn = time.time()
        [run] = store.list_runs()
        phases = {
            "queued": run.created_at - clicked,
            "claimed": run.started_at - clicked,
            "first step stored": stored - clicked,
            "drawn": drawn - clicked,
        }
        print("  " + ", ".join(f"{k} after {v:.2f} s" for k, v in phases.items()), file=sys.stderr)
        return drawn - clicked
    finally:
        browser.close()
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


def _first_metric_time(store: Store, timeout: float = 90.0) -> float:
    """When the (only) run's first training step is in the store, polled every 20 ms."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = store.list_runs()
        if runs and runs[0].progress_step > 0:
            return time.time()
        time.sleep(0.02)
    raise TimeoutError("no metric row within the timeout")


def run(quick: bool = False) -> list[dict]:
    if not Path(CHROMIUM).exists():
        print(
            "skipping the dashboard suite: no Chromium at /usr/bin/chromium (apt-get install chromium)", file=sys.stderr
        )
        return []
    from playwright.sync_api import sync_playwright

    records = []
    with sync_playwright() as playwright:
        for dataset, config in CONFIGS.items():
            if config and DATASETS[config["dataset"]].missing_files(default_data_dirs()):
                print(f"skipping {dataset}: its files are not in {default_data_dirs()}", file=sys.stderr)
                continue
            print(f"dashboard, {dataset}:", file=sys.stderr)
            times = [_one_press(playwright, config) for _ in range(1 if quick else 3)]
            records.append(
                {
                    "name": f"dashboard/press_train_to_first_point/{dataset}",
                    "value": statistics.median(times),
                    "spread": [min(times), max(times)],
                    "unit": "s",
                    "repetitions": len(times),
                    "target": "≤ 2 s",
                }
            )
    return records

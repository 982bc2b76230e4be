"""In a real browser, Cancel shows "cancelling…" at once: a run held by a worker that has not yet acted on the
request (this test plays that worker on the store: it claims the run and writes its first steps) shows the
cancelling state, from the store's cancel request, right after the click and until the worker stops the run;
then the run reads cancelled. No browser console error throughout.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to the `artifacts` folder: browser-cancelling.png (after the click, before the worker stops).
"""

import re
from pathlib import Path

import pytest

from cache import RunStatus, Store
from engine.jobs.submission import submit
from engine.training import parse_spec, plan_spec
from tests import browser_helpers as helpers
from tests.helpers import fast_spec, free_port

TIMEOUT_MS = 90_000
AT_ONCE_MS = 15_000  # a hang bound: the state follows the click's own redraw (well under a second alone)
WORKER = "test-worker"  # this test, playing a worker that acts on a cancel only when told to


def _running_run(store: Store) -> str:
    """A digits run claimed by `WORKER` with its first twenty steps written, as a worker leaves it mid-run."""
    spec = parse_spec(fast_spec(epochs=100))
    plan = plan_spec(spec)
    run_id = submit(store, spec).run_id
    store.register_worker(WORKER, backend="local", host="test", pid=1, device="cpu")
    assert store.claim_next(WORKER).id == run_id
    store.set_plan(run_id, plan=plan.summary(), total_steps=plan.steps)
    rows = [(0, {"epoch": 0.0, "test_accuracy": 0.1, "epsilon": 0.0})]
    rows += [(t, {"epoch": plan.epoch_of(t), "epsilon": 0.01 * t, "elapsed_s": 0.5 * t}) for t in range(1, 21)]
    store.append_metrics(run_id, rows)
    return run_id


@pytest.mark.browser
@pytest.mark.slow
def test_cancel_shows_cancelling_at_once_until_the_worker_stops(tmp_path: Path, artifacts: Path) -> None:
    home = tmp_path / "home"
    env, port = helpers.dashboard_env(home), free_port()
    server_log = tmp_path / "server.log"
    fail = helpers.failing_with_logs(server=server_log)
    failure_png = helpers.fresh_artifact(artifacts, "browser-cancel-failure.png")
    console_errors = helpers.ConsoleErrors()
    home.mkdir(parents=True)
    store = Store(home / "runs.sqlite3")
    run_id = _running_run(store)
    with helpers.healthy_dashboard(port, env=env, log=server_log, fail=fail), helpers.chromium() as browser:
        page = console_errors.watch(browser.new_page(viewport={"width": 1400, "height": 1600}))
        try:
            page.goto(f"{helpers.dashboard_url(port)}?run={run_id}", wait_until="domcontentloaded", timeout=TIMEOUT_MS)
            heading = helpers.run_heading(page, run_id)
            heading.filter(has_text="· training").first.wait_for(timeout=TIMEOUT_MS)
            page.get_by_text(re.compile(r"step 20 / [\d,]+ · about \d+ (min|s)")).wait_for(timeout=TIMEOUT_MS)
            page.get_by_role("button", name="Cancel run").click(timeout=TIMEOUT_MS)

            heading.filter(has_text="· cancelling…").first.wait_for(timeout=AT_ONCE_MS)
            page.get_by_text(re.compile(r"step 20 / [\d,]+ · cancelling…")).wait_for(timeout=AT_ONCE_MS)
            assert page.get_by_role("button", name="Cancelling…").is_disabled()
            run = store.get_run(run_id)
            assert run.status is RunStatus.RUNNING and run.cancel_requested  # the worker has not stopped it
            page.screenshot(path=artifacts / "browser-cancelling.png", full_page=True)

            store.finish(run_id, status=RunStatus.CANCELLED, worker=WORKER)  # the worker stops at its next step
            heading.filter(has_text="· cancelled").first.wait_for(timeout=TIMEOUT_MS)
            page.get_by_text("cancelling…").first.wait_for(state="detached", timeout=TIMEOUT_MS)  # stale copies too
        except Exception as exc:
            fail(helpers.failure_report(exc, page, screenshot=failure_png, errors=console_errors))
    assert not console_errors, console_errors

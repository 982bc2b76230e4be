"""A run's and a sweep's HTML report opened from disk in a real browser with the network cut off: it asks for
nothing but itself, draws its charts (static SVG with their lines and labels), shows its headline and fits an
800 px window without a horizontal scroll bar. No dashboard runs: the reports are built here.

Needs the Playwright Python package and Debian's Chromium at /usr/bin/chromium (no `playwright install`).
Screenshots go to the `artifacts` folder: browser-report-run.png, browser-report-sweep.png.
"""

from pathlib import Path

import pandas as pd
import pytest

from app import services
from app.common import report
from app.common.charts import sweep_frontier_figure
from app.sweep import release
from app.sweep.frontier import finished_points, frontier, grid_table
from cache import Store
from tests import browser_helpers as helpers

TIMEOUT_MS = 60_000
# Per inline SVG: its drawn width and the number of line paths and text labels in it.
CHARTS_JS = """
() => Array.from(document.querySelectorAll('figure > svg')).map(svg => ({
    width: svg.getBoundingClientRect().width,
    paths: svg.querySelectorAll('path').length,
    texts: Array.from(svg.querySelectorAll('text')).map(t => t.textContent),
}))
"""


def reports(store: Store, folder: Path) -> tuple[Path, Path]:
    """The first run's report and the sweep's, written to `folder`."""
    [sweep] = store.list_sweeps()
    runs = services.sweep_runs(sweep.id)
    run = runs[0]
    accountants = pd.DataFrame([{"accountant": "PLD", "ε": f"{run.result['epsilon']:.4g}"}])
    run_path = folder / "run.html"
    run_path.write_bytes(report.run_report(run, services.metrics_frame(run.id), accountants))
    points = finished_points(sweep, {r.id: r for r in runs})
    figure = sweep_frontier_figure(
        frontier(points, ["noise_multiplier"]), points, first="noise_multiplier", second=None
    )
    table = grid_table(sweep, {r.id: r for r in runs})
    sweep_path = folder / "sweep.html"
    sweep_path.write_bytes(report.sweep_report(sweep, table, figure, release.report_headline(sweep, runs)))
    return run_path, sweep_path


def files_only(asked: list[str]):
    """A route handler that records every request in `asked` and lets through only files (the report itself)."""

    def handle(route) -> None:
        asked.append(route.request.url)
        route.continue_() if route.request.url.startswith("file:") else route.abort()

    return handle


@pytest.mark.browser
@pytest.mark.slow
def test_reports_open_offline_and_draw_their_charts(trained_store, tmp_path: Path, artifacts: Path) -> None:
    run_path, sweep_path = reports(trained_store, tmp_path)
    with helpers.chromium() as browser:
        for path, name, charts, heading in (
            (run_path, "run", 2, "ε spent"),
            (sweep_path, "sweep", 1, "ε of releasing the best run"),
        ):
            context = browser.new_context(viewport={"width": 800, "height": 1200}, offline=True)
            asked: list[str] = []
            context.route("**/*", files_only(asked))
            page = context.new_page()
            page.goto(path.as_uri(), wait_until="load", timeout=TIMEOUT_MS)
            page.screenshot(path=helpers.fresh_artifact(artifacts, f"browser-report-{name}.png"), full_page=True)
            assert asked == [path.as_uri()], asked  # nothing but the report itself
            drawn = page.evaluate(CHARTS_JS)
            assert len(drawn) == charts, drawn
            for chart in drawn:  # drawn across the page's width, with its lines and axis labels
                assert 500 <= chart["width"] <= 800 and chart["paths"] >= 10, chart
            assert any("ε" in text for chart in drawn for text in chart["texts"])
            assert page.get_by_text(heading).first.is_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= 800
            context.close()

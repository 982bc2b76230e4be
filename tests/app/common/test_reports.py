"""The run and sweep reports (HTML): every headline the page shows, with δ; under 1 MB for a long run and for a
sweep of many runs; nothing a browser would fetch (no script, stylesheet, font or image from anywhere)."""

import html
import math
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from app import services
from app.common import charts, report
from app.common.labels import run_name
from app.sweep import release
from app.sweep.frontier import frontier, grid_table
from cache import RunStatus
from engine.jobs.sweep import submit_sweep
from engine.privacy import ACCOUNTANTS, epsilon_text
from engine.privacy.selection import TrialCount
from tests.apptest_helpers import MAIN, metrics, open_page, table_with
from tests.helpers import fast_spec

MAX_REPORT_BYTES = 1_000_000
FETCHING_TAGS = {"script", "link", "iframe", "object", "embed", "base", "img", "audio", "video", "source", "image"}
FETCHING_ATTRIBUTES = {"src", "href", "xlink:href", "srcset", "poster", "data", "action", "background", "formaction"}


class Parsed(HTMLParser):
    """A report's tags, the attributes through which a browser could fetch something, and its headline cards."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_style = tag == "style"
        for name, value in attrs:
            if name in FETCHING_ATTRIBUTES:
                self.links.append(value or "")
            if name == "style":
                self.styles.append(value or "")

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)

    def handle_endtag(self, tag):
        self._in_style = False


def assert_offline(data: bytes) -> str:
    """The report as text, after checking that it fetches nothing: no tag that loads a resource, every link
    within the page (#id) or data:, no CSS import or url() but to the page itself, no address but SVG's namespaces."""
    text = data.decode()
    parsed = Parsed(text)
    assert not FETCHING_TAGS & set(parsed.tags), FETCHING_TAGS & set(parsed.tags)
    assert all(link.startswith(("#", "data:")) for link in parsed.links), [
        link for link in parsed.links if not link.startswith(("#", "data:"))
    ]
    for style in parsed.styles:
        assert "@import" not in style and "@font-face" not in style
        assert all(url.strip("'\" ").startswith(("#", "data:")) for url in re.findall(r"url\(([^)]*)\)", style))
    addresses = re.findall(r"(\S*)(https?://\S*)", text)
    assert all(before.startswith("xmlns") for before, _ in addresses), addresses
    return text


def cards(text: str) -> dict[str, tuple[str, str | None]]:
    """The report's headline cards: label → (value, the line under it)."""
    found = re.findall(
        r"<div class='card'><div class='label'>(.*?)</div><div class='value'>(.*?)</div>"
        r"(?:<div class=sub>(.*?)</div>)?",
        text,
    )
    return {html.unescape(label): (html.unescape(value), html.unescape(sub) or None) for label, value, sub in found}


def long_metrics(store, run_id: str, steps: int = 5000) -> None:
    """Thousands of released metric rows for a run: every accountant's ε and the test accuracy at every step."""
    rows = [
        (
            step,
            {
                "epsilon": 3 * step / steps,
                "epsilon_pld": 2.9 * step / steps,
                "epsilon_advanced": 20 * step / steps,
                "epsilon_naive": 60 * step / steps,
                "test_accuracy": 0.5 + 0.4 * step / steps,
                "test_loss": 1 - 0.5 * step / steps,
            },
        )
        for step in range(1, steps + 1)
    ]
    store.append_metrics(run_id, rows, advance=False)


def test_a_long_runs_report_is_small_opens_offline_and_has_every_headline_of_its_panel(trained_store):
    run = trained_store.list_runs()[0]
    long_metrics(trained_store, run.id)
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params["run"] = run.id  # the Train page shows the run's panel
    at.run()
    assert not at.exception, at.exception
    panel = ("Test accuracy", f"ε spent ({ACCOUNTANTS[run.result['accountant']].label})", "Noise multiplier σ")
    shown = {label: metrics(at)[label] for label in (*panel, "Sampling rate q")}  # the run panel's headline
    accountants = table_with(at, "accountant")

    frame = services.metrics_frame(run.id)
    assert len(frame) > 5000
    data = report.run_report(run, frame, accountants)
    assert len(data) <= MAX_REPORT_BYTES, len(data)
    text = assert_offline(data)
    headline = cards(text)
    for label, value in shown.items():  # every number of the panel's headline, under the same label
        assert headline.get(label, (None,))[0] == value, (label, value, headline)
    [epsilon_label] = [label for label in headline if label.startswith("ε spent")]
    assert headline[epsilon_label][1] == "at δ = 1e-05" and headline["δ"][0] == "1e-05"
    assert headline["Status"][0] == "finished" and headline["Steps"][0] == f"{run.progress_step} / {run.total_steps}"
    assert f"<h1>{html.escape(run_name(run))}</h1>" in text and run.id in text
    for eps in accountants["ε"]:  # every accountant's ε
        assert f"<td>{eps}</td>" in text
    statement = run.result["privacy_statement"].splitlines()
    assert all(html.escape(line) in text for line in statement if line.strip())
    assert text.count("<svg") == 2 and "Cumulative privacy loss ε by accountant" in text and "Accuracy" in text


def test_a_sweep_report_heads_with_the_best_run_and_the_epsilon_of_releasing_it_and_stays_small(trained_store):
    [sweep] = trained_store.list_sweeps()
    runs = services.sweep_runs(sweep.id)
    at = open_page("sweep")
    assert not at.exception, at.exception
    shown = metrics(at)
    best = max(runs, key=lambda r: r.result["test_accuracy"])

    headline = release.report_headline(sweep, runs)
    table = grid_table(sweep, {r.id: r for r in runs})
    # many runs: the page's table 150 times over, and a frontier of 300 runs at 30 grid points
    many = pd.concat([table] * 150, ignore_index=True)
    points = pd.DataFrame(
        {
            "noise_multiplier": np.repeat(np.linspace(0.5, 5, 30), 10),
            "seed": np.tile(range(10), 30),
            "run": [f"r{i:011d}" for i in range(300)],
            "epsilon": np.repeat(np.geomspace(0.3, 30, 30), 10),
            "accuracy": np.random.default_rng(0).uniform(0.5, 0.95, 300),
        }
    )
    figure = charts.sweep_frontier_figure(
        frontier(points, ["noise_multiplier"]), points, first="noise_multiplier", second=None
    )
    data = report.sweep_report(sweep, many, figure, headline)
    assert len(data) <= MAX_REPORT_BYTES, len(data)
    text = assert_offline(data)
    found = cards(text)
    value, sub = found["Best run (test accuracy)"]
    assert value == run_name(best) and best.id in sub
    assert shown["Best run (test accuracy)"] in sub  # the page's figure, e.g. 65.74%
    assert f"ε = {epsilon_text(best.result['epsilon'])}" in sub
    assert found["ε of releasing the best run"] == (shown["ε of releasing the best run"], "at δ = 1e-05")
    assert found["δ"][0] == "1e-05"
    assert "ε of the private search" not in found  # a fixed grid
    assert "Releasing the best of a fixed grid of 2 runs costs" in text and text.count("<svg") == 1


def test_a_private_search_report_gives_the_search_bound_beside_the_release(home, store, monkeypatch):
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 2)
    raw = {"base": fast_spec(epochs=1), "grid": {"lr": [0.5, 1.0]}, "search": {"distribution": "poisson", "mean": 2}}
    submission = submit_sweep(store, raw)
    for run_id in submission.run_ids:
        assert store.request_cancel(run_id) is RunStatus.CANCELLED
    sweep, runs = store.get_sweep(submission.sweep_id), store.list_runs()
    headline = release.report_headline(sweep, runs)
    found = services.release_privacy(release.grid_json(sweep.spec), services.runs_json(runs))
    text = assert_offline(report.sweep_report(sweep, grid_table(sweep, {r.id: r for r in runs}), None, headline))
    shown = cards(text)
    assert shown["ε of the private search"] == (
        epsilon_text(found.search.epsilon),
        f"at δ = {found.search.delta:.3g}, every trial it may draw",
    )
    epsilon, delta = release.release_epsilon(sweep, runs, found)  # the trials' composition: some were cancelled
    assert math.isfinite(epsilon) and shown["ε of releasing the best run"] == (
        epsilon_text(epsilon),
        f"at δ = {delta:.3g}",
    )
    assert shown["Best run (test accuracy)"][0] == "none finished yet"
    assert "2 trial(s) were cancelled" in text

"""A run's or a sweep's report: one self-contained HTML page an analyst sends a colleague, with every headline its
page shows and δ (a run: its name, status, test accuracy, ε spent by the tightest accountant, σ, q or the steps
taken, every accountant's ε, the audit, the privacy statement; a sweep: its best run, the ε of releasing it and of
the private search), the released charts as static SVG (`report_svg`) and the configuration. It opens offline:
no script, font or image is fetched, and a long run's report stays well under 1 MB.

Released values only: the diagnostics computed on the private training data (`engine.jobs.disclosure`) never
enter it. Pure functions."""

import html
import json
import re
import time
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from app.common import charts
from app.common.audit_note import audit_of, audit_text
from app.common.headline import headline_numbers, number_or_none, number_text
from app.common.labels import algorithm_title, dataset_label, run_name, sweep_name
from app.common.report_svg import figure_svg
from app.common.safe_text import unescape
from cache import RunRecord, SweepRecord
from engine.metric_names import is_released_metric
from engine.privacy import epsilon_text
from engine.training.datasets import CSV_PREFIX

STYLE = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:1100px;margin:2em auto;"
    "padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
    "padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}h1{font-size:1.6em;margin-bottom:.2em}"
    "h2{font-size:1.2em;margin-top:1.6em}.note{color:#555;font-size:.9em}.cards{display:flex;flex-wrap:wrap;"
    "gap:12px;margin:1em 0}.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:140px}"
    ".card .label{font-size:.85em;color:#555}.card .value{font-size:1.5em;margin:.1em 0}.card .sub{font-size:.8em;"
    "color:#555}figure{margin:1em 0}svg{display:block}"
)
RELEASED_NOTE = (
    "Released values only: the configuration, ε by accountant, accuracy and loss on the held-out test set. "
    "Diagnostics computed on the private training data (lot loss and accuracy, clipping, gradient norms) are "
    "not in this report."
)
BOLD = re.compile(r"\*\*(.+?)\*\*")


@dataclass(frozen=True, kw_only=True)
class Card:
    """One headline of a report: its label, value and an optional line under it (plain text)."""

    label: str
    value: str
    sub: str | None = None


@dataclass(frozen=True, kw_only=True)
class SweepHeadline:
    """What the Sweep page heads a sweep with: its best run so far, the ε (and δ) of releasing it, the private
    search's own bound when the sweep is one, and the page's sentence on the release; or why it cannot be said."""

    best_name: str | None = None
    best_id: str | None = None
    best_accuracy: float | None = None
    best_epsilon: float | None = None
    epsilon: float | None = None  # of releasing the best run
    delta: float | None = None
    search_epsilon: float | None = None  # a private search: its bound over every trial it may draw
    search_delta: float | None = None
    sentence: str = ""
    caveat: str | None = None
    problem: str | None = None


def released(frame: pd.DataFrame) -> pd.DataFrame:
    """The metrics a run releases (ε by step for each accountant, test accuracy and loss, epoch)."""
    keep = [c for c in frame.columns if c == "step" or is_released_metric(c)]
    return frame[keep]


def page(title: str, body: list[str]) -> bytes:
    """A whole HTML document: its style inline, its charts inline SVG; nothing for a browser to fetch."""
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    ).encode()


def figure_html(figure: go.Figure) -> str:
    return f"<figure>{figure_svg(figure)}</figure>"


def markdown_html(text: str) -> str:
    """A note the page shows as Markdown (bold and escaped punctuation only) as HTML."""
    return BOLD.sub(r"<strong>\1</strong>", html.escape(unescape(text)))


def cards_html(cards: list[Card]) -> str:
    items = "".join(
        f"<div class='card'><div class='label'>{html.escape(c.label)}</div><div class='value'>"
        f"{html.escape(c.value)}</div>{f'<div class=sub>{html.escape(c.sub)}</div>' if c.sub else ''}</div>"
        for c in cards
    )
    return f"<div class='cards'>{items}</div>"


def table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, escape=True, na_rep="–", border=0)


def shareable(spec: dict) -> dict:
    """A spec as a report shows it: an uploaded dataset by its label, never its path on this machine nor its
    SHA-256 (a fingerprint of the private file)."""
    shown = {k: v for k, v in spec.items() if k != "data_sha256"}
    if isinstance(shown.get("dataset"), str) and shown["dataset"].startswith(CSV_PREFIX):
        shown["dataset"] = dataset_label(shown["dataset"])
    return shown


def spec_rows(spec: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [{"key": key, "value": json.dumps(value, default=str, ensure_ascii=False)} for key, value in spec.items()]
    )


def made_text() -> str:
    return f"report made {time.strftime('%Y-%m-%d %H:%M')}"


def run_cards(run: RunRecord, frame: pd.DataFrame) -> list[Card]:
    """The run panel's headline numbers, δ beside ε, its status and the steps taken."""
    delta = number_text(run.spec.get("delta"))
    cards = [Card(label="Status", value=run.status.value)]
    for number in headline_numbers(run, frame):
        label = unescape(number.label)
        if label.startswith("ε spent") and number_or_none(run.spec.get("delta")) is not None:
            cards += [Card(label=label, value=number.value, sub=f"at δ = {delta}"), Card(label="δ", value=delta)]
        else:
            cards.append(Card(label=label, value=number.value, sub=number.note))
    if not any(card.label == "Steps taken" for card in cards):
        total = f"{run.total_steps:,}" if run.total_steps else "?"
        cards.append(Card(label="Steps", value=f"{run.progress_step:,} / {total}"))
    return cards


def run_report(run: RunRecord, frame: pd.DataFrame, accountants: pd.DataFrame) -> bytes:
    """A run's report: what it trained, what it spent (every accountant), what it reached; `accountants` is the
    run panel's table of every accountant's final ε."""
    spec, result = run.spec, run.result if isinstance(run.result, dict) else {}
    algorithm = spec.get("algorithm")
    algorithm_shown = algorithm_title(algorithm) if isinstance(algorithm, str) else "?"
    data = released(frame)
    total = run.total_steps or (int(data["step"].max()) if len(data) else None)
    body = [
        f"<h1>{html.escape(run_name(run))}</h1>",
        f"<p class='note'>Run {html.escape(run.id)} · {html.escape(algorithm_shown)} on "
        f"{html.escape(dataset_label(spec.get('dataset')))} · engine {html.escape(str(run.engine_version))} · "
        f"{made_text()}</p>",
        cards_html(run_cards(run, frame)),
    ]
    if (audit := audit_of(result)) is not None:
        body.append(f"<p>{markdown_html(audit_text(audit, number_or_none(result.get('epsilon'))))}</p>")
    body += ["<h2>Every accountant</h2>", table_html(accountants)]
    statement = result.get("privacy_statement")
    if isinstance(statement, str):
        items = "".join(f"<li>{html.escape(line)}</li>" for line in statement.splitlines() if line.strip())
        body += ["<h2>Privacy statement</h2>", f"<ul>{items}</ul>"]
    body += ["<h2>Charts</h2>"]
    color = charts.run_color(run.id)  # the run panel's colour
    body.append(figure_html(charts.run_accuracy_figure(data, color=color, total_steps=total)))
    if "epsilon" in data:
        target = number_or_none(spec.get("target_epsilon"))
        body.append(figure_html(charts.epsilon_figure(data, total_steps=total, target_epsilon=target, color=color)))
    body += ["<h2>Configuration</h2>", table_html(spec_rows(shareable(spec))), f"<p class='note'>{RELEASED_NOTE}</p>"]
    return page(f"{run_name(run)} · DP lab run {run.id}", body)


def sweep_cards(headline: SweepHeadline) -> list[Card]:
    """The Sweep page's headline: the best run, the ε of releasing it (and of the private search), δ."""
    cards = [
        Card(
            label="Best run (test accuracy)",
            value=headline.best_name or "none finished yet",
            sub=" · ".join(
                part
                for part in (
                    f"test accuracy {headline.best_accuracy:.2%}" if headline.best_accuracy is not None else "",
                    f"ε = {epsilon_text(headline.best_epsilon)}" if headline.best_epsilon is not None else "",
                    f"run {headline.best_id}" if headline.best_id else "",
                )
                if part
            )
            or None,
        )
    ]
    if headline.epsilon is not None:
        delta = f"{headline.delta:.3g}" if headline.delta is not None else "?"
        cards += [
            Card(label="ε of releasing the best run", value=epsilon_text(headline.epsilon), sub=f"at δ = {delta}"),
            Card(label="δ", value=delta),
        ]
    if headline.search_epsilon is not None:
        search_delta = f"{headline.search_delta:.3g}" if headline.search_delta is not None else "?"
        cards.append(
            Card(
                label="ε of the private search",
                value=epsilon_text(headline.search_epsilon),
                sub=f"at δ = {search_delta}, every trial it may draw",
            )
        )
    return cards


def sweep_report(
    sweep: SweepRecord, table: pd.DataFrame, frontier: go.Figure | None, headline: SweepHeadline | None = None
) -> bytes:
    """A sweep's report: its best run and what releasing it costs (`headline`), the frontier, every run's point,
    status and result, and its grid."""
    name = sweep_name(sweep)
    body = [
        f"<h1>{html.escape(name)}</h1>",
        f"<p class='note'>Sweep {html.escape(sweep.id)} · {len(sweep.run_ids)} runs · {made_text()}</p>",
    ]
    if headline is not None:
        body.append(cards_html(sweep_cards(headline)))
        if headline.problem:
            problem = html.escape(headline.problem)
            body.append(f"<p>What releasing this sweep's best run costs cannot be said: {problem}</p>")
        if headline.sentence:
            body.append(f"<p>{html.escape(headline.sentence)}</p>")
        if headline.caveat:
            body.append(f"<p class='note'>{html.escape(headline.caveat)}</p>")
    if frontier is not None:
        body += ["<h2>Privacy–utility frontier</h2>", figure_html(frontier)]
    body += ["<h2>Runs</h2>", table_html(table.drop(columns=["error"], errors="ignore"))]
    grid = dict(sweep.spec)
    if isinstance(grid.get("base"), dict):
        grid["base"] = shareable(grid["base"])
    grid_text = json.dumps(grid, indent=2, default=str, ensure_ascii=False)
    body += ["<h2>Grid</h2>", f"<pre>{html.escape(grid_text)}</pre>"]
    body.append(f"<p class='note'>{RELEASED_NOTE}</p>")
    return page(f"{name} · DP lab sweep {sweep.id}", body)

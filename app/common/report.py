"""A run's or a sweep's report: one self-contained HTML page an analyst sends a colleague (configuration, privacy
statement, every accountant's ε, the released charts, the results). Released values only: the diagnostics
computed on the private training data (`engine.jobs.disclosure`) never enter it. Pure functions."""

import html
import json
import time

import pandas as pd
import plotly.graph_objects as go

from app.common import charts
from app.common.labels import ALGORITHM_TITLES, dataset_label
from cache import RunRecord, SweepRecord
from engine.jobs.disclosure import ACCOUNTANT_CURVE_PREFIX, RELEASED_METRICS
from engine.privacy import epsilon_text

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;"
    "vertical-align:top}th{background:#f3f3f3}h1{font-size:1.6em}h2{font-size:1.2em;margin-top:1.6em}"
    ".note{color:#555;font-size:.9em}"
)
RELEASED_NOTE = (
    "Released values only: the configuration, ε by accountant, accuracy and loss on the held-out test set. "
    "Diagnostics computed on the private training data (lot loss and accuracy, clipping, gradient norms) are "
    "not in this report."
)


def released(frame: pd.DataFrame) -> pd.DataFrame:
    """The metrics a run releases (ε by step for each accountant, test accuracy and loss, epoch)."""
    keep = [c for c in frame.columns if c == "step" or c in RELEASED_METRICS or c.startswith(ACCOUNTANT_CURVE_PREFIX)]
    return frame[keep]


def page(title: str, body: list[str]) -> bytes:
    """A whole HTML document; plotly.js is embedded once (the first chart), so it opens offline."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    ).encode()


def figure_html(figure: go.Figure, *, first: bool) -> str:
    figure.update_layout(template="plotly_white", height=380)
    return figure.to_html(full_html=False, include_plotlyjs=first)


def _epsilon_cell(value: object) -> object:
    """ε as the report shows it: ∞ where there is no finite bound (never inf or 1.8e308)."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return epsilon_text(value, ".4g") if is_number else value


def table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, escape=True, na_rep="–", border=0)


def spec_rows(spec: dict) -> pd.DataFrame:
    return pd.DataFrame([{"key": key, "value": json.dumps(value, default=str)} for key, value in spec.items()])


def run_report(run: RunRecord, frame: pd.DataFrame, accountants: pd.DataFrame) -> bytes:
    """A run's report: what it trained, what it spent (every accountant), what it reached."""
    spec, result = run.spec, run.result if isinstance(run.result, dict) else {}
    algorithm = spec.get("algorithm")
    name = ALGORITHM_TITLES.get(algorithm, str(algorithm)) if isinstance(algorithm, str) else "?"
    data = released(frame)
    total = run.total_steps or (int(data["step"].max()) if len(data) else None)
    body = [
        f"<h1>Run {html.escape(run.id)}: {html.escape(name)} on {html.escape(dataset_label(spec.get('dataset')))}</h1>",
        f"<p class='note'>Status {html.escape(run.status.value)} · engine {html.escape(run.engine_version)} · "
        f"report made {time.strftime('%Y-%m-%d %H:%M')} · {RELEASED_NOTE}</p>",
        "<h2>Results</h2>",
        table_html(
            pd.DataFrame(
                [
                    {
                        "ε spent (tightest accountant)": _epsilon_cell(result.get("epsilon")),
                        "δ": spec.get("delta"),
                        "test accuracy": result.get("test_accuracy"),
                        "steps": f"{run.progress_step:,} / {run.total_steps or '?'}",
                    }
                ]
            )
        ),
        "<h2>Every accountant</h2>",
        table_html(accountants),
    ]
    statement = result.get("privacy_statement")
    if isinstance(statement, str):
        items = "".join(f"<li>{html.escape(line)}</li>" for line in statement.splitlines() if line.strip())
        body += ["<h2>Privacy statement</h2>", f"<ul>{items}</ul>"]
    body += ["<h2>Charts</h2>"]
    accuracy = charts.run_accuracy_figure(data, color=charts.RUN_PALETTE[0], total_steps=total)
    body.append(figure_html(accuracy, first=True))
    if "epsilon" in data:
        target = spec.get("target_epsilon") if isinstance(spec.get("target_epsilon"), int | float) else None
        body.append(figure_html(charts.epsilon_figure(data, total_steps=total, target_epsilon=target), first=False))
    body += ["<h2>Configuration</h2>", table_html(spec_rows(spec))]
    return page(f"DP lab run {run.id}", body)


def sweep_report(
    sweep: SweepRecord, table: pd.DataFrame, frontier: go.Figure | None, release: str | None = None
) -> bytes:
    """A sweep's report: its grid, what releasing its best run costs (`release`), the frontier, and every run's
    point, status and result."""
    body = [
        f"<h1>Sweep {html.escape(sweep.name or sweep.id)} ({len(sweep.run_ids)} runs)</h1>",
        f"<p class='note'>Sweep {html.escape(sweep.id)} · report made {time.strftime('%Y-%m-%d %H:%M')} · "
        f"{RELEASED_NOTE}</p>",
    ]
    if release:
        body += ["<h2>Releasing the best run</h2>", f"<p>{html.escape(release)}</p>"]
    if frontier is not None:
        body += ["<h2>Privacy–utility frontier</h2>", figure_html(frontier, first=True)]
    body += ["<h2>Runs</h2>", table_html(table.drop(columns=["error"], errors="ignore"))]
    body += ["<h2>Grid</h2>", f"<pre>{html.escape(json.dumps(sweep.spec, indent=2, default=str))}</pre>"]
    return page(f"DP lab sweep {sweep.id}", body)

"""The reports' charts as static inline SVG, drawn by matplotlib (Agg, no display) from the same Plotly figures the
pages show (`app.common.charts` stays the one home of their series, colours, dashes and labels): a few kilobytes
each, with nothing to fetch, where embedding plotly.js would add about 4.8 MB to every report.

Drawn: scatter traces (lines, markers, open markers, text labels, error bars), log axes, axis ranges and ticks,
the horizontal and vertical limit lines (`shapes`) and their labels (`annotations`), the legend below the plot.
A long series is thinned to `MAX_POINTS` (evenly spaced, the last kept): more than a chart's width in pixels."""

import html
import io
import math
import re
from collections.abc import Sequence
from typing import Any

import matplotlib
import matplotlib.ticker
import matplotlib.transforms

matplotlib.use("Agg")  # no display: the figures are only ever written out
matplotlib.rcParams.update(
    {
        "svg.fonttype": "none",  # text as <text>, in the reader's own sans-serif font: no glyph outlines, no web font
        "svg.hashsalt": "dplab-report",  # the same ids each time: a report is reproducible
        "font.family": "sans-serif",
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.color": "#e6e6e6",
        "grid.linewidth": 0.6,
        "axes.edgecolor": "#999999",
        "axes.titlesize": 11,
        "axes.titlelocation": "left",
    }
)
from matplotlib.figure import Figure  # noqa: E402  (after the backend and settings above)

MAX_POINTS = 600  # per trace
MAX_TICKS = 9  # labelled ticks an axis holds without crowding
WIDTH_INCHES = 9.0
PX_PER_INCH = 100  # a Plotly height in pixels → inches
PT_PER_PX = 0.75
DASHES = {
    "solid": "-",
    "dot": (0, (1, 2)),
    "dash": (0, (4, 2.5)),
    "dashdot": (0, (4, 2, 1, 2)),
    "longdash": (0, (8, 3)),
    "longdashdot": (0, (8, 2, 1, 2)),
}
SIZE = re.compile(r'<svg([^>]*?) width="[^"]*" height="[^"]*"')  # a fixed size in pt: the page's width instead
METADATA = re.compile(r"<metadata>.*?</metadata>", re.DOTALL)
TAG = re.compile(r"<br\s*/?>|<[^>]+>")


def plain(text: Any) -> str:
    """Plotly text (HTML-escaped, with <br> and tags) as plain text matplotlib writes literally (no math mode)."""
    if text is None:
        return ""
    lines = TAG.sub(lambda m: "\n" if m.group(0).lower().startswith("<br") else "", str(text))
    return html.unescape(lines).replace("$", r"\$")


def _numbers(values: Any) -> list[float]:
    out = []
    for value in values if values is not None else ():
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            out.append(math.nan)
    return out


def thinned(x: Sequence[float], y: Sequence[float], limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """Every k-th point and the last, so that at most about `limit` remain."""
    if len(x) <= limit:
        return list(x), list(y)
    every = math.ceil(len(x) / limit)
    keep = [*range(0, len(x), every)]
    if keep[-1] != len(x) - 1:
        keep.append(len(x) - 1)
    return [x[i] for i in keep], [y[i] for i in keep]


def _color(value: Any, default: str = "#4C78A8") -> Any:
    """A Plotly colour ('#rrggbb', 'rgba(r,g,b,a)', a name) as matplotlib reads it."""
    if not isinstance(value, str):
        return default
    if match := re.fullmatch(r"rgba?\(([^)]*)\)", value.replace(" ", "")):
        parts = [float(p) for p in match.group(1).split(",")]
        return (parts[0] / 255, parts[1] / 255, parts[2] / 255, parts[3] if len(parts) > 3 else 1.0)
    return value


def _wants_legend(figure) -> bool:
    shown = figure.layout.showlegend
    named = [t for t in figure.data if t.name and t.showlegend is not False]
    return bool(named) and (shown is True or (shown is None and len(named) > 1))


def _scatter(ax, trace, legend: bool, log_y: bool) -> None:
    x, y = thinned(_numbers(trace.x), _numbers(trace.y))
    if log_y:  # no finite place for a value ≤ 0 on a log axis: a gap
        y = [v if v > 0 else math.nan for v in y]
    mode = trace.mode or ("lines+markers" if len(x) < 20 else "lines")
    alpha = trace.opacity if trace.opacity is not None else 1.0
    line, marker = trace.line, trace.marker
    color = _color(line.color if "lines" in mode and line.color else marker.color)
    label = plain(trace.name) if legend and trace.name and trace.showlegend is not False else None
    symbol = marker.symbol if isinstance(marker.symbol, str) else "circle"
    style = {
        "color": color,
        "alpha": alpha * (marker.opacity if "lines" not in mode and isinstance(marker.opacity, float) else 1.0),
        "linestyle": DASHES.get(line.dash or "solid", "-") if "lines" in mode else "none",
        "linewidth": (line.width or 2) * PT_PER_PX,
        "marker": ("s" if symbol.startswith("square") else "D" if symbol.startswith("diamond") else "o")
        if "markers" in mode
        else None,
        "markersize": (marker.size if isinstance(marker.size, int | float) else 6) * PT_PER_PX,
        "markerfacecolor": "none" if symbol.endswith("-open") else _color(marker.color, color),
        "markeredgecolor": _color(marker.color, color),
        "label": label,
    }
    error = trace.error_y
    if error is not None and error.array is not None and len(_numbers(error.array)) == len(x):
        plus = _numbers(error.array)
        minus = plus if error.symmetric is not False or error.arrayminus is None else _numbers(error.arrayminus)
        ax.errorbar(x, y, yerr=[minus, plus], ecolor=_color(error.color, color), elinewidth=0.9, capsize=2, **style)
    else:
        ax.plot(x, y, **style)
    if "text" in mode and trace.text is not None and not isinstance(trace.text, str):
        for xi, yi, text in zip(x, y, trace.text, strict=False):
            if math.isfinite(xi) and math.isfinite(yi):
                ax.annotate(plain(text), (xi, yi), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)


def _axis(ax, axis, which: str) -> None:
    """An axis's title, scale, range and ticks."""
    set_label, set_scale, set_lim, set_ticks = (
        (ax.set_xlabel, ax.set_xscale, ax.set_xlim, ax.set_xticks)
        if which == "x"
        else (ax.set_ylabel, ax.set_yscale, ax.set_ylim, ax.set_yticks)
    )
    set_label(plain(axis.title.text))
    log = axis.type == "log"
    if log:
        set_scale("log")
    if axis.range is not None and None not in axis.range:
        low, high = (10.0**v for v in axis.range) if log else axis.range
        set_lim(low, high)
    elif axis.rangemode == "tozero" and not log:
        set_lim(left=0) if which == "x" else set_lim(bottom=0)
    if axis.tickvals is not None:
        values = list(axis.tickvals)
        labels = [plain(t) for t in axis.ticktext] if axis.ticktext is not None else None
        every = math.ceil(len(values) / MAX_TICKS)  # 1-2-5 ticks over many decades: one a decade
        set_ticks(values[::every], labels[::every] if labels else None)
        if log:
            (ax.xaxis if which == "x" else ax.yaxis).set_minor_formatter(matplotlib.ticker.NullFormatter())


def _shapes(ax, figure, log_y: bool) -> None:
    for shape in figure.layout.shapes:
        if shape.type != "line":
            continue
        style = {
            "color": _color(shape.line.color, "#888888"),
            "linestyle": DASHES.get(shape.line.dash or "solid", "-"),
            "linewidth": (shape.line.width or 1.5) * PT_PER_PX,
        }
        if shape.y0 == shape.y1 and shape.xref == "paper":
            ax.axhline(shape.y0, xmin=shape.x0, xmax=shape.x1, **style)
        elif shape.x0 == shape.x1 and shape.yref == "paper":
            ax.axvline(shape.x0, ymin=shape.y0, ymax=shape.y1, **style)
        else:
            ax.plot([shape.x0, shape.x1], [shape.y0, shape.y1], **style)
    for note in figure.layout.annotations:
        if not note.text or note.x is None or note.y is None:
            continue
        x_paper, y_paper = note.xref == "paper", note.yref == "paper"
        y = 10.0**note.y if log_y and not y_paper else note.y  # Plotly places a note on a log axis by log10
        transform = matplotlib.transforms.blended_transform_factory(
            ax.transAxes if x_paper else ax.transData, ax.transAxes if y_paper else ax.transData
        )
        ax.text(
            note.x,
            y,
            plain(note.text),
            transform=transform,
            ha={"left": "left", "right": "right"}.get(note.xanchor, "center"),
            va={"top": "top", "bottom": "bottom"}.get(note.yanchor, "center"),
            color=_color(note.font.color, "#444444"),
            fontsize=8,
        )


def figure_svg(figure) -> str:
    """A Plotly figure as one inline <svg> element, as wide as the page holds."""
    height_px = figure.layout.height or 340
    fig = Figure(figsize=(WIDTH_INCHES, height_px / PX_PER_INCH))
    ax = fig.add_subplot()
    if figure.layout.title.text:
        ax.set_title(plain(figure.layout.title.text))
    log_y = figure.layout.yaxis.type == "log"
    legend = _wants_legend(figure)
    for trace in figure.data:
        if trace.type == "scatter" and trace.visible in (None, True):
            _scatter(ax, trace, legend, log_y)
    _axis(ax, figure.layout.xaxis, "x")  # after the data: an axis without a range fits it
    _axis(ax, figure.layout.yaxis, "y")
    _shapes(ax, figure, log_y)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.16), ncol=2, fontsize=8, frameon=False)
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # no XML declaration nor DOCTYPE (which names a DTD by its web address)
    svg = METADATA.sub("", svg, count=1)  # the RDF block naming its vocabularies by web address: nothing to show
    return SIZE.sub(r'<svg\1 style="max-width:100%;height:auto"', svg, count=1)

"""The Sweep and Compare pages' charts: the privacy–utility frontier, and several runs overlaid (each in its
run colour)."""

import math
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from app.common.charts.base import REFERENCE_COLOR, RUN_PALETTE, run_colors
from app.common.safe_text import plotly_text

# The Sweep and Compare pages: the privacy–utility frontier, and several runs overlaid (each in its run colour).
FRONTIER_X_TITLE = "ε spent (tightest accountant)"
LOG_TICKS = [m * 10.0**e for e in range(-3, 4) for m in (1, 2, 5)]  # 0.001, 0.002, 0.005, …, 5000
LABEL_POSITIONS = ("middle right", "top center", "middle left", "bottom center")  # a line's labels, by its place
ACCURACY_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2)  # gridlines of the accuracy axis
ACCURACY_HEADROOM = 0.08  # of the span of the values, beyond the highest and below the lowest
MIN_ACCURACY_SPAN = 0.05  # values closer than this still get a readable range around them
MAX_GRIDLINES = 8


def _value_text(value: object) -> str:
    """A grid value as a label: numbers by `g`, anything else (a sweep made elsewhere) as text, HTML-escaped."""
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else plotly_text(value)


def _hover_data(frame: pd.DataFrame, columns: list[str], *, texts: list[str]) -> object:
    """`columns` of `frame` as a trace's customdata, the `texts` columns as escaped labels (None when empty)."""
    if not len(frame):
        return None
    data = frame[columns].copy()
    for column in dict.fromkeys(texts):
        data[column] = data[column].map(_value_text)
    return data.to_numpy()


MOVING_STATES = {  # a run off the frontier's lines → (marker symbol, its legend entry, the word after its ε)
    "running": ("circle-open", "running: ε and test accuracy so far", "so far"),
    "cancelled": ("x-thin-open", "cancelled: ε and test accuracy when stopped", "when stopped"),
}


def _moving_trace(
    runs: pd.DataFrame, color: str, first: str, name_of: str, group: str | None, state: str = "running"
) -> go.Scatter:
    """Runs still training (open markers) or cancelled with a result (crosses); with no `group`, the legend's one
    entry for them (no points). Unlabelled: several seeds of a grid point sit on top of each other, so their
    values are in the tooltip only."""
    symbol, entry, when = MOVING_STATES[state]
    return go.Scatter(
        x=runs["epsilon"] if group else [None],
        y=runs["accuracy"] if group else [None],
        mode="markers",
        marker={"color": color, "size": 9, "symbol": symbol, "line": {"width": 2, "color": color}},
        name=entry if group is None else f"{group} ({state})",
        legendgroup=group,
        showlegend=group is None,
        customdata=_hover_data(runs, ["run", first], texts=["run", first]) if group else None,
        hovertemplate=f"run %{{customdata[0]}} ({state}), {name_of} %{{customdata[1]}}<br>"
        f"ε {when} %{{x:.3f}} · test accuracy {when} %{{y:.3f}}<extra></extra>",
    )


def _comparison_layout(fig: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 15}},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        height=360,
        xaxis_title=x_title,
        yaxis_title=y_title,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0, "font": {"size": 10}},
        hovermode="closest",
    )
    return fig


def _spread_bars(line: pd.DataFrame, color: str) -> dict:
    """Error bars from each grid point's mean accuracy down to `low` and up to `high`."""
    return {
        "type": "data",
        "symmetric": False,
        "array": line["high"] - line["accuracy"],
        "arrayminus": line["accuracy"] - line["low"],
        "color": color,
        "thickness": 1.2,
        "width": 4,
    }


def sweep_frontier_figure(
    summary: pd.DataFrame,
    points: pd.DataFrame,
    *,
    first: str,
    second: str | None,
    series: Sequence[object] = (),
    labels: Mapping[str, str] | None = None,
    references: Sequence[tuple[str, float]] = (),
    running: pd.DataFrame | None = None,
    cancelled: pd.DataFrame | None = None,
    log_x: bool = False,
) -> go.Figure:
    """A sweep's privacy–utility frontier: test accuracy against ε spent. Per grid point the mean over seeds
    with its spread as error bars (`summary`: the parameters, epsilon, accuracy, low, high, seeds), every
    finished run faintly behind (`points`: the parameters, seed, run, epsilon, accuracy). One line per value
    of the `second` parameter, coloured by its place in `series` (the grid's order), so a line keeps its
    colour while the sweep fills in; the lines' points are labelled with the `first` parameter's value. `references`
    (label, accuracy): dashed lines such as the non-private accuracy and the majority class's. `running` (the
    parameters, run, epsilon, accuracy): the runs still training, as open markers at their ε and latest test
    accuracy so far, which move right as they train; `cancelled` (the same columns): runs stopped by a cancel with
    a result, as crosses at their ε and test accuracy when they stopped. `log_x`: a logarithmic ε axis, which the
    caller decides from the grid (`app.sweep.frontier.log_epsilon_axis`), so that it stays one type while the
    sweep fills in. The accuracy axis ends on gridlines with room above and below every marker."""
    labels = labels or {}
    name_of = plotly_text(labels.get(first, first))  # grid keys and values of a sweep made elsewhere: any text
    fig = go.Figure()
    if second is None:
        groups = [("mean over seeds", summary, points)]
    else:
        groups = [
            (
                f"{plotly_text(labels.get(second, second))} = {_value_text(v)}",
                summary[summary[second] == v],
                points[points[second] == v],
            )
            for v in series
        ]
    for index, (name, line, runs) in enumerate(groups):
        color = RUN_PALETTE[index % len(RUN_PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=runs["epsilon"],
                y=runs["accuracy"],
                mode="markers",
                marker={"color": color, "size": 6, "opacity": 0.35},
                name=f"{name} (each run)",
                legendgroup=name,
                showlegend=False,
                customdata=_hover_data(runs, ["run", "seed"], texts=["run", "seed"]),
                hovertemplate="run %{customdata[0]}, seed %{customdata[1]}<br>ε %{x:.3f} · accuracy %{y:.3f}"
                "<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=line["epsilon"],
                y=line["accuracy"],
                mode="lines+markers+text",
                text=[_value_text(v) for v in line[first]],
                textposition=LABEL_POSITIONS[index % len(LABEL_POSITIONS)],  # lines apart: labels on other sides
                textfont={"size": 10, "color": color},
                marker={"color": color, "size": 9},
                line={"color": color, "width": 2},
                error_y=_spread_bars(line, color),
                name=name,
                legendgroup=name,
                customdata=_hover_data(line, [first, "seeds", "low", "high"], texts=[first]),
                hovertemplate=f"{name_of} %{{customdata[0]}}<br>ε %{{x:.3f}} · mean accuracy %{{y:.3f}}<br>"
                "spread %{customdata[2]:.3f}–%{customdata[3]:.3f} over %{customdata[1]} seed(s)<extra></extra>",
            )
        )
    moving = {"running": running, "cancelled": cancelled}
    for state, frame in moving.items():
        if frame is None or not len(frame):
            continue
        for index, (name, _, _) in enumerate(groups):  # in their line's colour, one legend entry for all
            own = frame if second is None else frame[frame[second] == series[index]]
            fig.add_trace(_moving_trace(own, RUN_PALETTE[index % len(RUN_PALETTE)], first, name_of, name, state))
        fig.add_trace(_moving_trace(frame.iloc[:0], REFERENCE_COLOR, first, name_of, None, state))
    _comparison_layout(
        fig, f"Privacy–utility frontier (points labelled by {name_of})", FRONTIER_X_TITLE, "test accuracy"
    )
    drawn = [frame["epsilon"] for frame in (points, *moving.values()) if frame is not None and len(frame)]
    epsilons = pd.concat(drawn) if drawn else pd.Series(dtype=float)
    positive = epsilons[epsilons > 0]
    log_x = bool(log_x and len(positive))
    if log_x:
        span = [float(positive.min()) / 1.3, float(positive.max()) * 1.3]
    else:  # from 0 on a linear axis
        span = [0.0, float(epsilons.max()) * 1.3 if len(epsilons) else 1.0]
    _add_references(fig, references, span)
    if log_x:
        ticks = [t for t in LOG_TICKS if span[0] <= t <= span[1]]
        fig.update_xaxes(type="log", tickvals=ticks, ticktext=[_value_text(t) for t in ticks])
    else:
        fig.update_xaxes(type="linear", rangemode="tozero")
    accuracies = [
        summary["low"],
        summary["high"],
        *(frame["accuracy"] for frame in (points, *moving.values()) if frame is not None),
    ]
    fig.update_yaxes(**accuracy_axis([*pd.concat(accuracies, ignore_index=True), *(a for _, a in references)]))
    return fig


def _add_references(fig: go.Figure, references: Sequence[tuple[str, float]], span: Sequence[float]) -> None:
    """Dashed grey horizontal lines across `span` of the ε axis, each named in the legend with its accuracy."""
    for name, accuracy in references:
        fig.add_trace(
            go.Scatter(
                x=list(span),
                y=[accuracy, accuracy],
                mode="lines",
                line={"color": REFERENCE_COLOR, "dash": "dash", "width": 1.5},
                name=f"{plotly_text(name)}: {accuracy:.3f}",
                meta="reference",
                hoverinfo="skip",
            )
        )


def accuracy_axis(values: Iterable[float]) -> dict:
    """The accuracy axis of a frontier (`update_yaxes` keywords): from a gridline below the lowest of `values` to
    one above the highest, with `ACCURACY_HEADROOM` of the span beyond each, so that every marker, error bar and
    reference line lies between two gridlines (Plotly's own range ends between gridlines, a marker above the top
    one, and cuts a marker at its edge in half). Gridlines every 0.01 to 0.2, at most about eight; none above 1 when
    no value is (the range then ends a margin above the gridline at 1)."""
    finite = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if not finite:
        return {}
    low, high = min(finite), max(finite)
    pad = ACCURACY_HEADROOM * max(high - low, MIN_ACCURACY_SPAN)
    low, high = low - pad, high + pad
    step = next((s for s in ACCURACY_STEPS if (high - low) / s <= MAX_GRIDLINES), ACCURACY_STEPS[-1])
    bottom = max(0.0, math.floor(round(low / step, 9)) * step)
    top = math.ceil(round(high / step, 9)) * step
    if top > 1.0 >= max(finite):  # no gridline above a perfect accuracy: the top one at 1, a margin above it
        top = 1.0 + min(pad, step / 2)
    return {"range": [bottom, top], "autorange": False, "tick0": 0.0, "dtick": step}


def runs_overlay_figure(
    curves: Mapping[str, pd.DataFrame],
    column: str,
    *,
    title: str,
    y_title: str,
    x: str = "step",
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """One line per run (`curves`: run id → its metrics frame), each in its own colour and named by `names`
    (run id → a readable label; the id when absent); a run without the `x` column (`epoch`) is drawn against
    steps."""
    fig = go.Figure()
    colors, names = run_colors(list(curves)), names or {}
    for run_id, frame in curves.items():
        name = plotly_text(names.get(run_id, run_id))
        x_column = x if x in frame else "step"
        data = frame[[x_column, column]].dropna() if column in frame else pd.DataFrame({x_column: [], column: []})
        fig.add_trace(
            go.Scatter(
                x=data[x_column],
                y=data[column],
                mode="lines",
                line={"color": colors[run_id], "width": 2},
                name=name,
                hovertemplate=f"{name} ({plotly_text(run_id)})<br>{x_column} %{{x:.3g}} · %{{y:.3f}}<extra></extra>",
            )
        )
    return _comparison_layout(fig, title, "epochs" if x == "epoch" else "step", y_title)


def runs_frontier_figure(
    points: pd.DataFrame,
    names: Mapping[str, str] | None = None,
    *,
    references: Sequence[tuple[str, float]] = (),
) -> go.Figure:
    """Test accuracy against ε spent, one marker per run in its own colour, labelled by `names` (run id → a
    readable label; the id when absent) (`points`: run, epsilon, accuracy, label, audited). An audited run's bar
    reaches from its audited lower bound ε̂ to its ε, with a legend entry that says so; `references` (label,
    accuracy): dashed lines such as the majority class's and the non-private run's accuracy."""
    fig = go.Figure()
    colors, names = run_colors(list(points["run"])), names or {}
    for row in points.itertuples(index=False):
        audited = getattr(row, "audited", math.nan)
        interval = {} if math.isnan(audited) else {"error_x": _audit_interval(row.epsilon, audited, colors[row.run])}
        hover = plotly_text(row.label)  # a label holds the run's dataset and model
        if not math.isnan(audited):
            hover += f"<br>audited ε̂ = {audited:.3g} ≤ true ε ≤ {row.epsilon:.3g}"
        fig.add_trace(
            go.Scatter(
                x=[row.epsilon],
                y=[row.accuracy],
                mode="markers+text",
                text=[plotly_text(names.get(row.run, row.run))],
                textposition="top center",
                textfont={"size": 10},
                marker={"color": colors[row.run], "size": 12, "line": {"width": 1, "color": "white"}},
                name=plotly_text(names.get(row.run, row.run)),
                hovertemplate=f"{hover}<extra></extra>",
                **interval,
            )
        )
    if points["audited"].notna().any():  # the bars: a legend entry of their own, in grey (each bar is its run's)
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line={"color": REFERENCE_COLOR, "width": 2},
                name=AUDIT_BAR_NAME,
                meta="legend",  # an entry, no data
                hoverinfo="skip",
            )
        )
    _comparison_layout(fig, "Privacy–utility frontier of the selected runs", FRONTIER_X_TITLE, "test accuracy")
    if not points.empty:
        right = float(points["epsilon"].max()) * 1.12 or 1.0
        _add_references(fig, references, [0.0, right])
        fig.update_xaxes(range=[0, right])
        fig.update_yaxes(**accuracy_axis([*points["accuracy"], *(accuracy for _, accuracy in references)]))
    return fig


AUDIT_BAR_NAME = "bar: audited lower bound ε̂ to ε (the true ε lies on it)"


def _audit_interval(epsilon: float, audited: float, color: str) -> dict:
    """A horizontal bar from the audited lower bound ε̂ to the reported ε: where the true ε lies."""
    return {
        "type": "data",
        "symmetric": False,
        "array": [0.0],
        "arrayminus": [max(0.0, epsilon - audited)],
        "color": color,
        "thickness": 2,
        "width": 6,
    }

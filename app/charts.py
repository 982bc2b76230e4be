"""Plotly figure builders: pure functions from data frames to figures."""

import hashlib
import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from app.safe_text import plotly_text
from engine.privacy import UNBOUNDED_EPSILON, epsilon_text

RUN_COLOR = "#4C78A8"
LIMIT_COLOR = "#E45756"


def _base(title: str, y_title: str, total_steps: int | None) -> go.Figure:
    layout = {
        "title": {"text": title, "font": {"size": 15}},
        "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
        "height": 300,
        "xaxis": {"title": {"text": "step"}, **({"range": [0, total_steps]} if total_steps else {})},
        "yaxis": {"title": {"text": y_title}},
        "showlegend": False,
        "hovermode": "x unified",
        "template": "none",  # Streamlit's theme replaces the template in the browser: no need to copy plotly's
    }
    return go.Figure(layout=layout)  # one validated layout: ~5x faster than a chain of update_layout calls


def _hline(
    fig: go.Figure,
    y: float,
    *,
    color: str,
    text: str | None = None,
    position: str = "bottom right",
    width: float = 1.5,
    font_size: int | None = None,
) -> None:
    """A dashed horizontal line across the plot with an optional label at one end: `add_hline`'s look, at a
    fraction of its cost (it re-validates the layout for each line, which live charts redraw every second)."""
    fig.layout.shapes += (
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": y,
            "y1": y,
            "line": {"color": color, "dash": "dash", "width": width},
        },
    )
    if text:
        vertical, horizontal = position.split()
        fig.layout.annotations += (
            {
                "text": text,
                "showarrow": False,
                "xref": "paper",
                "yref": "y",
                "y": y,
                "x": 1 if horizontal == "right" else 0,
                "xanchor": horizontal,
                "yanchor": "top" if vertical == "bottom" else "bottom",
                "font": {"color": color, **({"size": font_size} if font_size else {})},
            },
        )


def _series(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    if column not in frame:
        return pd.DataFrame({"step": [], column: []})
    return frame[["step", column]].dropna()


def loss_figure(
    frame: pd.DataFrame, *, total_steps: int | None = None, smoothing: int = 20, color: str = RUN_COLOR
) -> go.Figure:
    data = _series(frame, "train_loss")
    fig = _base("Training loss (private diagnostic)", "cross-entropy on the lot", total_steps)
    fig.add_trace(
        go.Scatter(
            x=data["step"],
            y=data["train_loss"],
            mode="lines",
            opacity=0.3,
            line={"color": color, "width": 1},
            name="per step",
        )
    )
    smooth = data["train_loss"].rolling(smoothing, min_periods=1).mean()
    fig.add_trace(
        go.Scatter(
            x=data["step"],
            y=smooth,
            mode="lines",
            line={"color": color, "width": 2},
            name=f"mean of {smoothing} steps",
        )
    )
    return fig


ACCOUNTANT_STYLES = {  # metric column → (legend label, dash)
    "epsilon": ("RDP (every step)", "solid"),
    "epsilon_pld": ("PLD", "dot"),
    "epsilon_advanced": ("advanced composition", "dash"),
    "epsilon_naive": ("naive composition", "dashdot"),
    "epsilon_zcdp": ("zCDP", "longdash"),
    "epsilon_optimal_pure": ("optimal composition (pure ε)", "dot"),
}


def epsilon_figure(
    frame: pd.DataFrame,
    *,
    total_steps: int | None = None,
    target_epsilon: float | None = None,
    color: str | None = None,
) -> go.Figure:
    """Cumulative ε by every accountant that applies. The y axis fits the tight ones (RDP, PLD, the
    target); looser bounds may run off the top: each legend entry carries the accountant's latest ε. RDP, the
    live line, is drawn in the run's `color`; the others in their accountant colours (as on the Plan page)."""
    fig = _base("Cumulative privacy loss ε by accountant", "ε", total_steps)
    tight_max = 0.0
    for column, (label, dash) in ACCOUNTANT_STYLES.items():
        data = _series(frame, column)
        if data.empty:
            continue
        latest = float(data[column].iloc[-1])
        line_color = (color or RUN_COLOR) if column == "epsilon" else ACCOUNTANT_COLORS[column.removeprefix("epsilon_")]
        fig.add_trace(
            go.Scatter(
                x=data["step"],
                y=data[column].where(data[column] < UNBOUNDED_EPSILON),  # no finite bound: a gap
                mode="lines" if column == "epsilon" else "lines+markers",
                name=f"{label}: ε = {epsilon_text(latest)}",
                marker={"size": 5},
                line={"color": line_color, "width": 2.5 if column == "epsilon" else 1.5, "dash": dash},
            )
        )
        if column in ("epsilon", "epsilon_pld"):
            tight_max = max(tight_max, float(data[column].max()))
    if target_epsilon is not None:
        _hline(fig, target_epsilon, color=LIMIT_COLOR, text=f"target ε = {target_epsilon:g}")
        tight_max = max(tight_max, target_epsilon)
    if tight_max > 0:
        fig.update_yaxes(range=[0, tight_max * 1.15])
    fig.update_layout(
        showlegend=True, legend={"x": 0.01, "y": 0.99, "bgcolor": "rgba(128,128,128,0.12)", "font": {"size": 10}}
    )
    return fig


def planned_epsilon_figure(
    steps: Sequence[int],
    epsilons: Sequence[float],
    *,
    target_epsilon: float | None,
    pld: tuple[Sequence[int], Sequence[float]] | None = None,
) -> go.Figure:
    """Before launch: the ε a configuration will have spent after each step, ending at the whole run's: by RDP,
    and by PLD too when PLD calibrated σ (then PLD's curve is the one that meets the target)."""
    title = "Planned ε over the run (PLD, and RDP dotted)" if pld else "Planned ε over the run (RDP)"
    fig = _base(title, "ε", int(steps[-1]) if len(steps) else None)
    rdp_line = {"color": RUN_COLOR, "width": 1, "dash": "dot"} if pld else {"color": RUN_COLOR, "width": 2}
    fig.add_trace(
        go.Scatter(
            x=list(steps),
            y=list(epsilons),
            mode="lines",
            line=rdp_line,
            name="ε (RDP)",
            hovertemplate="after %{x:,} steps: ε = %{y:.3g} (RDP)<extra></extra>",
        )
    )
    if pld:
        fig.add_trace(
            go.Scatter(
                x=list(pld[0]),
                y=list(pld[1]),
                mode="lines+markers",
                name="ε (PLD)",
                line={"color": RUN_COLOR, "width": 2},
                marker={"size": 4},
                hovertemplate="after %{x:,} steps: ε = %{y:.3g} (PLD)<extra></extra>",
            )
        )
    if target_epsilon is not None:
        _hline(fig, target_epsilon, color=LIMIT_COLOR, text=f"target {target_epsilon:g}", width=1)
    fig.update_layout(height=210, margin={"l": 10, "r": 10, "t": 32, "b": 10}, title={"font": {"size": 13}})
    fig.update_yaxes(rangemode="tozero")
    return fig


# Colours per run: the same run has the same colour on every page and chart (a stable hash of its
# id into a ten-colour palette that reads on light and dark backgrounds).
RUN_PALETTE = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#72B7B2",
    "#C9A100",
    "#B279A2",
    "#FF9DA6",
    "#9D755D",
    "#79706E",
)


def run_color(run_id: str) -> str:
    """The colour of a run on every chart of the dashboard."""
    digest = int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)
    return RUN_PALETTE[digest % len(RUN_PALETTE)]


# The Plan page: one colour per accountant, the same on every Plan chart (RDP keeps the run colour of the
# live ε chart); dashes as in ACCOUNTANT_STYLES.
ACCOUNTANT_COLORS = {
    "rdp": RUN_COLOR,
    "pld": "#F58518",
    "zcdp": "#72B7B2",
    "advanced": "#54A24B",
    "naive": "#B279A2",
    "optimal_pure": "#E45756",
}
ACCOUNTANT_LABELS = {
    "rdp": "RDP",
    "pld": "PLD",
    "zcdp": "zCDP",
    "advanced": "advanced composition",
    "naive": "naive composition",
    "optimal_pure": "optimal composition (pure ε)",
}


def accountant_dash(name: str) -> str:
    return ACCOUNTANT_STYLES.get("epsilon" if name == "rdp" else f"epsilon_{name}", ("", "solid"))[1]


def plan_epsilon_figure(
    frame: pd.DataFrame, *, target_epsilon: float | None = None, tightest: str | None = None, log_y: bool = True
) -> go.Figure:
    """ε against epochs, one line per accountant (`frame`: accountant, epochs, epsilon, ∞ where a bound has no
    finite value), the target as a line. Legend entries carry each accountant's final ε; the log axis keeps the loose
    composition bounds in view."""
    fig = go.Figure()
    for name in ACCOUNTANT_LABELS:
        data = frame[frame["accountant"] == name].sort_values("epochs")
        if data.empty:
            continue
        final = float(data["epsilon"].iloc[-1])
        label = f"{ACCOUNTANT_LABELS[name]}: ε = {epsilon_text(final)}"
        label += " (tightest)" if name == tightest else ""
        fig.add_trace(
            go.Scatter(
                x=data["epochs"],
                y=data["epsilon"].replace(math.inf, math.nan),  # no finite bound: a gap in the line
                mode="lines+markers" if name == "pld" else "lines",  # PLD: a coarse grid, its points shown
                name=label,
                marker={"size": 5},
                line={
                    "color": ACCOUNTANT_COLORS[name],
                    "width": 3 if name == tightest else 2,
                    "dash": accountant_dash(name),
                },
                hovertemplate=f"{ACCOUNTANT_LABELS[name]}: ε = %{{y:.4g}}<extra></extra>",
            )
        )
    if target_epsilon is not None:
        fig.add_hline(y=target_epsilon, line={"color": LIMIT_COLOR, "dash": "dash", "width": 1.5})
        fig.add_annotation(  # annotations on a log axis take log10 of the value (add_hline's would not)
            x=0.5,
            xref="paper",
            xanchor="center",
            y=math.log10(target_epsilon) if log_y else target_epsilon,
            yanchor="bottom",
            text=f"target ε = {target_epsilon:g}",
            showarrow=False,
            font={"color": LIMIT_COLOR},
        )
    fig.update_layout(
        title={"text": "Privacy loss ε against epochs, by accountant", "font": {"size": 15}},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        height=420,
        xaxis_title="epochs",
        yaxis_title="ε (log scale)" if log_y else "ε",
        hovermode="x unified",
        showlegend=True,
        legend={"orientation": "h", "x": 0, "y": -0.18, "yanchor": "top", "font": {"size": 11}},
    )
    fig.update_xaxes(rangemode="tozero")
    if log_y:
        fig.update_yaxes(type="log", dtick=1)  # a label at each power of ten only
    return fig


# The Sweep and Compare pages: the privacy–utility frontier, and several runs overlaid (each in its run colour).
FRONTIER_X_TITLE = "ε spent (tightest accountant)"
LOG_TICKS = [m * 10.0**e for e in range(-3, 4) for m in (1, 2, 5)]  # 0.001, 0.002, 0.005, …, 5000


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


def _comparison_layout(fig: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 15}},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        height=360,
        xaxis_title=x_title,
        yaxis_title=y_title,
        showlegend=True,
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0, "font": {"size": 10}},
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
) -> go.Figure:
    """A sweep's privacy–utility frontier: test accuracy against ε spent. Per grid point the mean over seeds
    with its spread as error bars (`summary`: the parameters, epsilon, accuracy, low, high, seeds), every
    finished run faintly behind (`points`: the parameters, seed, run, epsilon, accuracy). One line per value
    of the `second` parameter, coloured by its place in `series` (the grid's order), so a line keeps its
    colour while the sweep fills in; points are labelled with the `first` parameter's value."""
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
                textposition="middle right",  # beside the marker, clear of its error bar
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
    _comparison_layout(
        fig, f"Privacy–utility frontier (points labelled by {name_of})", FRONTIER_X_TITLE, "test accuracy"
    )
    epsilons = points["epsilon"] if len(points) else pd.Series(dtype=float)
    if len(epsilons) and epsilons.min() > 0 and epsilons.max() / epsilons.min() >= 10:
        low, high = float(epsilons.min()) / 1.3, float(epsilons.max()) * 1.3
        ticks = [t for t in LOG_TICKS if low <= t <= high]
        fig.update_xaxes(type="log", tickvals=ticks, ticktext=[_value_text(t) for t in ticks])
    else:
        fig.update_xaxes(rangemode="tozero")
    return fig


def runs_overlay_figure(
    curves: Mapping[str, pd.DataFrame], column: str, *, title: str, y_title: str, x: str = "step"
) -> go.Figure:
    """One line per run (`curves`: run id → its metrics frame), each in its run colour; a run without
    the `x` column (`epoch`) is drawn against steps."""
    fig = go.Figure()
    for run_id, frame in curves.items():
        x_column = x if x in frame else "step"
        data = frame[[x_column, column]].dropna() if column in frame else pd.DataFrame({x_column: [], column: []})
        fig.add_trace(
            go.Scatter(
                x=data[x_column],
                y=data[column],
                mode="lines",
                line={"color": run_color(run_id), "width": 2},
                name=plotly_text(run_id),
                hovertemplate=f"{plotly_text(run_id)}<br>{x_column} %{{x:.3g}} · %{{y:.3f}}<extra></extra>",
            )
        )
    return _comparison_layout(fig, title, "epochs" if x == "epoch" else "step", y_title)


def runs_frontier_figure(points: pd.DataFrame) -> go.Figure:
    """Test accuracy against ε spent, one marker per run in its run colour (`points`: run, epsilon, accuracy, label)."""
    fig = go.Figure()
    for row in points.itertuples(index=False):
        fig.add_trace(
            go.Scatter(
                x=[row.epsilon],
                y=[row.accuracy],
                mode="markers+text",
                text=[plotly_text(row.run)],
                textposition="top center",
                textfont={"size": 10},
                marker={"color": run_color(row.run), "size": 12, "line": {"width": 1, "color": "white"}},
                name=plotly_text(row.run),
                hovertemplate=f"{plotly_text(row.label)}<extra></extra>",  # a label holds the run's dataset and model
            )
        )
    _comparison_layout(fig, "Privacy–utility frontier of the selected runs", FRONTIER_X_TITLE, "test accuracy")
    _pad_ranges(fig, points["epsilon"], points["accuracy"])
    return fig


def _pad_ranges(fig: go.Figure, x: pd.Series, y: pd.Series) -> None:
    """Axes with room around the markers and their labels: x from 0, y a little beyond the extremes."""
    if x.empty:
        return
    fig.update_xaxes(range=[0, float(x.max()) * 1.12 or 1.0])
    pad = max(0.02, 0.2 * float(y.max() - y.min()))
    fig.update_yaxes(range=[max(0.0, float(y.min()) - pad), min(1.05, float(y.max()) + pad)])


def png_config(filename: str) -> dict:
    """`st.plotly_chart(config=...)`: the modebar's camera button downloads the chart as `filename`.png."""
    return {"toImageButtonOptions": {"format": "png", "filename": filename, "scale": 2}, "displaylogo": False}


# The Train page: accuracy with its references, and the private diagnostics of a run, in the run's colour.

REFERENCE_COLOR = "#8A8F98"  # mid grey: reads on light and dark backgrounds
MAX_POINTS = 2000  # per trace: a long run's per-step series is thinned before it reaches the browser
BOTTOM_LEGEND = {"orientation": "h", "x": 0.0, "y": -0.22, "yanchor": "top", "font": {"size": 10}}


def rgba(hex_color: str, alpha: float) -> str:
    """'#RRGGBB' with an opacity, for fills."""
    red, green, blue = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"


def thin(data: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Every k-th row (and the last) so that at most about `max_points` remain."""
    if len(data) <= max_points:
        return data
    every = math.ceil(len(data) / max_points)
    return pd.concat([data.iloc[::every], data.iloc[[-1]]]).drop_duplicates(subset="step")


def run_accuracy_figure(
    frame: pd.DataFrame,
    *,
    color: str,
    total_steps: int | None = None,
    references: Sequence[tuple[str, float]] = (),
    smoothing: int = 20,
) -> go.Figure:
    """Test accuracy, accuracy on each step's lot (a private diagnostic, smoothed over `smoothing` steps)
    and non-private reference accuracies as dashed horizontal lines."""
    fig = _base("Accuracy", "accuracy", total_steps)
    lot = _series(frame, "train_accuracy")
    if not lot.empty:
        smooth = lot.assign(train_accuracy=lot["train_accuracy"].rolling(smoothing, min_periods=1).mean())
        smooth = thin(smooth)
        fig.add_trace(
            go.Scatter(
                x=smooth["step"],
                y=smooth["train_accuracy"],
                mode="lines",
                opacity=0.8,
                line={"color": color, "width": 1.5, "dash": "dot"},
                name=f"on the lot, mean of {smoothing} steps (private, not released)",
            )
        )
    test = _series(frame, "test_accuracy")
    fig.add_trace(
        go.Scatter(
            x=test["step"],
            y=test["test_accuracy"],
            mode="lines+markers",
            marker={"size": 4},
            line={"color": color, "width": 2},
            name="test set",
        )
    )
    for label, accuracy in references:
        _hline(
            fig,
            accuracy,
            color=REFERENCE_COLOR,
            text=f"{plotly_text(label)}: {accuracy:.3f}",
            position="bottom left",
            font_size=10,
        )
    fig.update_yaxes(range=[0, 1.02])
    fig.update_layout(height=340, showlegend=True, legend=BOTTOM_LEGEND, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def private_diagnostics_figure(
    frame: pd.DataFrame,
    *,
    color: str,
    total_steps: int | None = None,
    clip_norm: float | None = None,
    smoothing: int = 20,
) -> go.Figure:
    """The lot's per-example gradient norms before clipping, as the 10th–90th percentile band and the median
    (left axis, with the clipping norm C), and the fraction of the lot that was clipped (right axis); each a
    mean over `smoothing` steps, as lots vary a lot from step to step."""
    fig = _base("Private diagnostics — computed on private data, not released", "gradient norm", total_steps)
    columns = ["grad_norm_p10", "grad_norm_p50", "grad_norm_p90"]
    norms = frame[["step", *columns]].dropna() if set(columns) <= set(frame.columns) else pd.DataFrame()
    if not norms.empty:
        norms = thin(norms.assign(**{c: norms[c].rolling(smoothing, min_periods=1).mean() for c in columns}))
        fig.add_trace(
            go.Scatter(
                x=norms["step"],
                y=norms["grad_norm_p90"],
                mode="lines",
                line={"width": 0},
                showlegend=False,
                name="norm p90",
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=norms["step"],
                y=norms["grad_norm_p10"],
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=rgba(color, 0.3),
                name="norms p10–p90",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=norms["step"],
                y=norms["grad_norm_p50"],
                mode="lines",
                line={"color": color, "width": 2},
                name="median norm",
            )
        )
    if clip_norm is not None:
        _hline(fig, clip_norm, color=REFERENCE_COLOR, text=f"C = {clip_norm:g}", position="top left", font_size=10)
    clipped = _series(frame, "clip_fraction")
    if not clipped.empty:
        clipped = thin(clipped.assign(clip_fraction=clipped["clip_fraction"].rolling(smoothing, min_periods=1).mean()))
        fig.add_trace(
            go.Scatter(
                x=clipped["step"],
                y=clipped["clip_fraction"],
                mode="lines",
                yaxis="y2",
                line={"color": color, "width": 2, "dash": "dot"},
                name="fraction clipped (right axis)",
            )
        )
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        height=340,
        showlegend=True,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend=BOTTOM_LEGEND | {"title": {"text": f"mean of {smoothing} steps:"}},
        yaxis2={
            "title": "fraction clipped",
            "overlaying": "y",
            "side": "right",
            "range": [0, 1.02],
            "tickvals": [0, 0.25, 0.5, 0.75, 1],
            "tickformat": ".0%",
            "showgrid": False,
        },
    )
    return fig


def regret_figure(frame: pd.DataFrame, *, color: str, total_steps: int | None = None) -> go.Figure:
    """Online learners: regret against rounds, the theorem's bound on its expectation, and non-private RWM on the
    same stream (computed on private data, as the regret itself: not released)."""
    fig = _base("Regret against rounds (private diagnostic)", "regret", total_steps)
    fig.update_xaxes(title_text="round")
    styles = {
        "regret": ("private RWM", {"color": color, "width": 2}),
        "regret_bound": (
            "bound on its expectation (Dwork & Roth Thms 11.1, 11.3)",
            {"color": LIMIT_COLOR, "width": 1.5, "dash": "dash"},
        ),
        "regret_nonprivate": ("non-private RWM", {"color": REFERENCE_COLOR, "width": 1.5, "dash": "dot"}),
    }
    for column, (name, line) in styles.items():
        data = _series(frame, column)
        fig.add_trace(go.Scatter(x=data["step"], y=data[column], mode="lines", name=name, line=line))
    fig.update_layout(showlegend=True, legend=BOTTOM_LEGEND)
    fig.update_yaxes(rangemode="tozero")
    return fig

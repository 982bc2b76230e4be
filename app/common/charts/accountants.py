"""Privacy accounting charts: ε spent by each accountant during a run, the planned ε, and the Plan page's
ε against epochs by every accountant."""

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from app.common.charts.base import BOTTOM_LEGEND, LIMIT_COLOR, RUN_COLOR, base_figure, hline, series
from engine.metric_names import EPSILON, STREAMED_ACCOUNTANT, epsilon_metric
from engine.privacy import ACCOUNTANTS, UNBOUNDED_EPSILON, epsilon_text
from engine.privacy.accountants import pld

LOG_TICKS = [m * 10.0**e for e in range(-4, 5) for m in (1, 2, 5)]  # 1e-4, 2e-4, 5e-4, …, 5e4
LOG_AXIS_RATIO = 2  # a bound this many times above the tight ones turns the ε axis logarithmic
# One colour per accountant, the same on every chart, none of them a run's (`base.RUN_PALETTE`): on a run's ε chart
# the streamed accountant (RDP), the live line, takes the run's colour and every other accountant stays apart from
# it. The accountants take these in the registry's order (RDP, PLD, naive, advanced, zCDP, optimal pure); chosen far
# (CIELAB) from the run colours and from each other, they read on light and dark backgrounds. A seventh accountant
# starts the palette again; an accountant without a dash in ACCOUNTANT_DASHES takes DEFAULT_DASH.
ACCOUNTANT_PALETTE = ("#6A3D9A", "#E7298A", "#637939", "#A6761D", "#1B9E77", "#B15928")
ACCOUNTANT_DASHES = {"rdp": "solid", "pld": "dot", "advanced": "dash", "naive": "dashdot", "zcdp": "longdash"}
DEFAULT_DASH = "dot"  # an accountant with no dash of its own
STREAMED_SUFFIX = " (every step)"  # the streamed accountant's legend entry on a run's chart


def accountant_label(name: str) -> str:
    """An accountant's legend label (the registry's); the name itself for one no longer registered."""
    return ACCOUNTANTS[name].label if name in ACCOUNTANTS else name


def accountant_color(name: str) -> str:
    """An accountant's colour: the palette by its place in the registry (one not registered: the last)."""
    names = list(ACCOUNTANTS)
    place = names.index(name) if name in names else len(names)
    return ACCOUNTANT_PALETTE[place % len(ACCOUNTANT_PALETTE)]


def accountant_dash(name: str) -> str:
    return ACCOUNTANT_DASHES.get(name, DEFAULT_DASH)


def epsilon_figure(
    frame: pd.DataFrame,
    *,
    total_steps: int | None = None,
    target_epsilon: float | None = None,
    color: str | None = None,
) -> go.Figure:
    """Cumulative ε by every accountant that applies, the legend below the plot (each entry with the accountant's
    latest ε). The y axis fits the tight ones (RDP, PLD, the target), or turns logarithmic when a looser bound
    (the composition theorems) runs more than `LOG_AXIS_RATIO` times above them, so that every curve stays in
    view. RDP, the live line, is drawn in the run's `color`; the others in their accountant colours (as on the
    Plan page)."""
    fig = base_figure("Cumulative privacy loss ε by accountant", "ε", total_steps)
    tight_max, low, high = 0.0, math.inf, 0.0
    for name in ACCOUNTANTS:
        streamed = name == STREAMED_ACCOUNTANT
        column = EPSILON if streamed else epsilon_metric(name)
        data = series(frame, column)
        if data.empty:
            continue
        latest = float(data[column].iloc[-1])
        label = accountant_label(name) + (STREAMED_SUFFIX if streamed else "")
        fig.add_trace(
            go.Scatter(
                x=data["step"],
                y=data[column].where(data[column] < UNBOUNDED_EPSILON),  # no finite bound: a gap
                mode="lines" if streamed else "lines+markers",
                name=f"{label}: ε = {epsilon_text(latest)}",
                marker={"size": 5},
                line={
                    "color": (color or RUN_COLOR) if streamed else accountant_color(name),
                    "width": 2.5 if streamed else 1.5,
                    "dash": accountant_dash(name),
                },
            )
        )
        if name in (STREAMED_ACCOUNTANT, pld.NAME):
            tight_max = max(tight_max, float(data[column].max()))
        finite = data[column][(data[column] > 0) & (data[column] < UNBOUNDED_EPSILON)]
        if len(finite):
            low, high = min(low, float(finite.min())), max(high, float(finite.max()))
    if target_epsilon is not None:
        tight_max = max(tight_max, target_epsilon)
    log_axis = tight_max > 0 and high > LOG_AXIS_RATIO * tight_max  # bounds far above the tight ones: log shows all
    if target_epsilon is not None:
        hline(
            fig,
            target_epsilon,
            color=LIMIT_COLOR,
            text=f"target ε = {target_epsilon:g}",
            position="top left",
            log_axis=log_axis,
        )
    if log_axis:
        ticks = [t for t in LOG_TICKS if low / 1.5 <= t <= high * 1.5]
        fig.update_yaxes(
            type="log",
            range=[math.log10(low / 1.5), math.log10(high * 1.5)],
            title_text="ε (log scale)",
            tickvals=ticks,
            ticktext=[f"{t:g}" for t in ticks],
        )
    elif tight_max > 0:
        fig.update_yaxes(range=[0, tight_max * 1.15])
    fig.update_layout(height=340, showlegend=True, legend=BOTTOM_LEGEND)
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
    fig = base_figure(title, "ε", int(steps[-1]) if len(steps) else None)
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
        hline(fig, target_epsilon, color=LIMIT_COLOR, text=f"target {target_epsilon:g}", width=1)
    fig.update_layout(height=210, margin={"l": 10, "r": 10, "t": 32, "b": 10}, title={"font": {"size": 13}})
    fig.update_yaxes(rangemode="tozero")
    return fig


def plan_epsilon_figure(
    frame: pd.DataFrame, *, target_epsilon: float | None = None, tightest: str | None = None, log_y: bool = True
) -> go.Figure:
    """ε against epochs, one line per accountant (`frame`: accountant, epochs, epsilon, ∞ where a bound has no
    finite value), the target as a line. Legend entries carry each accountant's final ε; the log axis keeps the loose
    composition bounds in view."""
    fig = go.Figure()
    for name in ACCOUNTANTS:
        data = frame[frame["accountant"] == name].sort_values("epochs")
        if data.empty:
            continue
        final = float(data["epsilon"].iloc[-1])
        label = f"{accountant_label(name)}: ε = {epsilon_text(final)}"
        label += " (tightest)" if name == tightest else ""
        fig.add_trace(
            go.Scatter(
                x=data["epochs"],
                y=data["epsilon"].replace(math.inf, math.nan),  # no finite bound: a gap in the line
                mode="lines" if ACCOUNTANTS[name].live else "lines+markers",  # a slow one: a coarse grid, points shown
                name=label,
                marker={"size": 5},
                line={
                    "color": accountant_color(name),
                    "width": 3 if name == tightest else 2,
                    "dash": accountant_dash(name),
                },
                hovertemplate=f"{accountant_label(name)}: ε = %{{y:.4g}}<extra></extra>",
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

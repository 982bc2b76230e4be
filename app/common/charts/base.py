"""Chart building blocks shared by every page: the base figure, limit lines, run colours, thinning, PNG export."""

import hashlib
import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

RUN_COLOR = "#4C78A8"
LIMIT_COLOR = "#E45756"


def base_figure(title: str, y_title: str, total_steps: int | None) -> go.Figure:
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


def hline(
    fig: go.Figure,
    y: float,
    *,
    color: str,
    text: str | None = None,
    position: str = "bottom right",
    width: float = 1.5,
    font_size: int | None = None,
    log_axis: bool = False,
) -> None:
    """A dashed horizontal line across the plot with an optional label at one end: `add_hline`'s look, at a
    fraction of its cost (it re-validates the layout for each line, which live charts redraw every second). On a
    logarithmic y axis (`log_axis`) Plotly places a shape at the value but an annotation at its log10: the label
    is given the log10, so that it sits on its line."""
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
                "y": math.log10(y) if log_axis and y > 0 else y,
                "x": 1 if horizontal == "right" else 0,
                "xanchor": horizontal,
                "yanchor": "top" if vertical == "bottom" else "bottom",
                "font": {"color": color, **({"size": font_size} if font_size else {})},
            },
        )


def series(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    if column not in frame:
        return pd.DataFrame({"step": [], column: []})
    return frame[["step", column]].dropna()


# Colours per run: twelve that stay apart from each other and read on light and dark backgrounds. A run alone
# on a chart takes a stable hash of its id; runs side by side take the palette in order, so up to twelve of
# them never share a colour. None is an accountant's colour (`accountants.ACCOUNTANT_PALETTE`): a run's ε line
# never looks like another accountant's.
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
    "#2F4B7C",
    "#17BECF",
    "#8C564B",
)


def run_color(run_id: str) -> str:
    """The colour of a run shown alone (its run panel): a stable hash of its id into the palette."""
    digest = int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)
    return RUN_PALETTE[digest % len(RUN_PALETTE)]


def run_colors(run_ids: Sequence[str]) -> dict[str, str]:
    """Colours for runs drawn together: the palette in order, distinct for up to `len(RUN_PALETTE)` runs."""
    return {run_id: RUN_PALETTE[i % len(RUN_PALETTE)] for i, run_id in enumerate(dict.fromkeys(run_ids))}


def reference_line(fig: go.Figure, y: float, *, name: str, x_end: float, color: str) -> None:
    """A dashed horizontal reference named in the legend (not written over the plot, where curves run)."""
    fig.add_trace(
        go.Scatter(
            x=[0, x_end],
            y=[y, y],
            mode="lines",
            line={"color": color, "dash": "dash", "width": 1.5},
            name=name,
            hovertemplate=f"{name}<extra></extra>",
        )
    )


def png_config(filename: str) -> dict:
    """`st.plotly_chart(config=...)`: the modebar's camera button downloads the chart as `filename`.png."""
    return {"toImageButtonOptions": {"format": "png", "filename": filename, "scale": 2}, "displaylogo": False}


# The run charts: a grey for reference lines, a legend below the plot, and long series thinned.

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

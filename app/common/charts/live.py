"""A run's live charts (Train, Runs and Sweep pages): loss, accuracy with its references, private diagnostics,
regret; each in the run's colour."""

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from app.common.charts.base import (
    BOTTOM_LEGEND,
    LIMIT_COLOR,
    REFERENCE_COLOR,
    RUN_COLOR,
    base_figure,
    hline,
    reference_line,
    rgba,
    series,
    thin,
)
from app.common.safe_text import plotly_text


def loss_figure(
    frame: pd.DataFrame,
    *,
    total_steps: int | None = None,
    smoothing: int = 20,
    color: str = RUN_COLOR,
    private: bool = True,
) -> go.Figure:
    """Training loss per step and smoothed; for a private run, labelled as what it is: computed on private data."""
    data = series(frame, "train_loss")
    title, axis = (
        ("Training loss (private diagnostic)", "cross-entropy on the lot")
        if private
        else ("Training loss", "cross-entropy on the batch")
    )
    fig = base_figure(title, axis, total_steps)
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


def run_accuracy_figure(
    frame: pd.DataFrame,
    *,
    color: str,
    total_steps: int | None = None,
    references: Sequence[tuple[str, float]] = (),
    smoothing: int = 20,
    private: bool = True,
) -> go.Figure:
    """Test accuracy, accuracy on each step's lot (for a private run a private diagnostic; smoothed over
    `smoothing` steps) and non-private reference accuracies as dashed horizontal lines."""
    fig = base_figure("Accuracy", "accuracy", total_steps)
    lot = series(frame, "train_accuracy")
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
                name=f"on the lot, mean of {smoothing} steps (private, not released)"
                if private
                else f"on the batch, mean of {smoothing} steps",
            )
        )
    test = series(frame, "test_accuracy")
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
    x_end = total_steps or (float(frame["step"].max()) if "step" in frame and len(frame) else 1.0)
    for label, accuracy in references:
        reference_line(fig, accuracy, name=f"{plotly_text(label)}: {accuracy:.3f}", x_end=x_end, color=REFERENCE_COLOR)
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
    fig = base_figure("Private diagnostics — computed on private data, not released", "gradient norm", total_steps)
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
        hline(fig, clip_norm, color=REFERENCE_COLOR, text=f"C = {clip_norm:g}", position="top left", font_size=10)
    clipped = series(frame, "clip_fraction")
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
    fig = base_figure("Regret against rounds (private diagnostic)", "regret", total_steps)
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
        data = series(frame, column)
        fig.add_trace(go.Scatter(x=data["step"], y=data[column], mode="lines", name=name, line=line))
    fig.update_layout(showlegend=True, legend=BOTTOM_LEGEND)
    fig.update_yaxes(rangemode="tozero")
    return fig

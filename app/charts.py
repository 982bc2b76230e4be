"""Plotly figure builders: pure functions from data frames to figures."""

import pandas as pd
import plotly.graph_objects as go

RUN_COLOR = "#4C78A8"
LIMIT_COLOR = "#E45756"


def _base(title: str, y_title: str, total_steps: int | None) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title={"text": title, "font": {"size": 15}},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        height=300,
        xaxis_title="step",
        yaxis_title=y_title,
        showlegend=False,
        hovermode="x unified",
    )
    if total_steps:
        fig.update_xaxes(range=[0, total_steps])
    return fig


def _series(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    if column not in frame:
        return pd.DataFrame({"step": [], column: []})
    return frame[["step", column]].dropna()


def accuracy_figure(frame: pd.DataFrame, *, total_steps: int | None = None) -> go.Figure:
    data = _series(frame, "test_accuracy")
    fig = _base("Test accuracy", "accuracy", total_steps)
    fig.add_trace(
        go.Scatter(
            x=data["step"],
            y=data["test_accuracy"],
            mode="lines+markers",
            marker={"size": 4},
            line={"color": RUN_COLOR},
            name="test accuracy",
        )
    )
    fig.update_yaxes(range=[0, 1])
    return fig


def loss_figure(frame: pd.DataFrame, *, total_steps: int | None = None, smoothing: int = 20) -> go.Figure:
    data = _series(frame, "train_loss")
    fig = _base("Training loss (private diagnostic)", "cross-entropy on the lot", total_steps)
    fig.add_trace(
        go.Scatter(
            x=data["step"],
            y=data["train_loss"],
            mode="lines",
            opacity=0.3,
            line={"color": RUN_COLOR, "width": 1},
            name="per step",
        )
    )
    smooth = data["train_loss"].rolling(smoothing, min_periods=1).mean()
    fig.add_trace(
        go.Scatter(
            x=data["step"],
            y=smooth,
            mode="lines",
            line={"color": RUN_COLOR, "width": 2},
            name=f"mean of {smoothing} steps",
        )
    )
    return fig


def epsilon_figure(
    frame: pd.DataFrame, *, total_steps: int | None = None, target_epsilon: float | None = None
) -> go.Figure:
    data = _series(frame, "epsilon")
    fig = _base("Cumulative privacy loss ε (RDP accountant)", "ε", total_steps)
    fig.add_trace(
        go.Scatter(
            x=data["step"], y=data["epsilon"], mode="lines", line={"color": RUN_COLOR, "width": 2}, name="ε spent"
        )
    )
    if target_epsilon is not None:
        fig.add_hline(
            y=target_epsilon,
            line={"color": LIMIT_COLOR, "dash": "dash"},
            annotation_text=f"target ε = {target_epsilon:g}",
            annotation_position="bottom right",
        )
    return fig

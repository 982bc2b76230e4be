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


ACCOUNTANT_STYLES = {  # metric column → (legend label, dash)
    "epsilon": ("RDP (every step)", "solid"),
    "epsilon_pld": ("PLD", "dot"),
    "epsilon_advanced": ("advanced composition", "dash"),
    "epsilon_naive": ("naive composition", "dashdot"),
    "epsilon_zcdp": ("zCDP", "longdash"),
}


def epsilon_figure(
    frame: pd.DataFrame, *, total_steps: int | None = None, target_epsilon: float | None = None
) -> go.Figure:
    """Cumulative ε by every accountant that applies. The y axis fits the tight ones (RDP, PLD, the
    target); looser bounds may run off the top, their values stay in the hover and the table."""
    fig = _base("Cumulative privacy loss ε by accountant", "ε", total_steps)
    tight_max = 0.0
    for column, (label, dash) in ACCOUNTANT_STYLES.items():
        data = _series(frame, column)
        if data.empty:
            continue
        mode = "lines" if column == "epsilon" else "lines+markers"
        fig.add_trace(
            go.Scatter(
                x=data["step"],
                y=data[column],
                mode=mode,
                name=label,
                marker={"size": 5},
                line={"color": RUN_COLOR if column == "epsilon" else None, "width": 2, "dash": dash},
            )
        )
        if column in ("epsilon", "epsilon_pld"):
            tight_max = max(tight_max, float(data[column].max()))
    if target_epsilon is not None:
        fig.add_hline(
            y=target_epsilon,
            line={"color": LIMIT_COLOR, "dash": "dash"},
            annotation_text=f"target ε = {target_epsilon:g}",
            annotation_position="bottom right",
        )
        tight_max = max(tight_max, target_epsilon)
    if tight_max > 0:
        fig.update_yaxes(range=[0, tight_max * 1.15])
    fig.update_layout(showlegend=True, legend={"x": 0.01, "y": 0.99, "bgcolor": "rgba(128,128,128,0.12)",
                                               "font": {"size": 10}})  # fmt: skip
    return fig

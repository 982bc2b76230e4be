"""What a private run's ε means for an attacker: the highest true-positive rate any membership-inference attack
can reach at each false-positive rate (`engine.privacy.tradeoff`), beside random guessing and, for an audited
run, the audit's lower bound. Pure: a stored curve in, a figure out."""

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from app.common.charts.base import BOTTOM_LEGEND, REFERENCE_COLOR, RUN_COLOR, rgba
from engine.privacy import ACCOUNTANTS
from engine.privacy.tradeoff import ACCUSED, AttackBound, bound_polyline, percent_up

TITLE = "What ε means for an attacker"
X_TITLE = "false positives: non-members accused"
Y_TITLE = "true positives: members caught"
LABEL_AT = (0.3, 0.1)  # the 1% label's place: under the diagonal, where no curve runs
AUDIT_COLOR = "#E45756"


def audit_curve(audit: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """The curve of (ε̂, δ)-DP for an audit's ε̂ at its δ: the audit refutes every guarantee below ε̂, so the run's
    best attack rises above this curve at some false-positive rate (with the audit's confidence)."""
    fpr, tpr = bound_polyline([float(audit["epsilon"])], [float(audit["delta"])])
    return [float(x) for x in fpr], [float(y) for y in tpr]


def attack_figure(bound: AttackBound, *, color: str = RUN_COLOR, audit: Mapping[str, Any] | None = None) -> go.Figure:
    """The run's bound on every attack (filled beneath: what attacks may reach), the diagonal of random guessing,
    the point at 1% false positives, and the audit's ε̂ curve when the run was audited."""
    by = ACCOUNTANTS[bound.accountant].label if bound.accountant in ACCOUNTANTS else "no accountant"
    fig = go.Figure(
        layout={
            "title": {"text": TITLE, "font": {"size": 15}},
            "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
            "height": 380,
            "xaxis": {"title": {"text": X_TITLE}, "range": [0, 1], "tickformat": ".0%", "constrain": "domain"},
            "yaxis": {"title": {"text": Y_TITLE}, "range": [0, 1.02], "tickformat": ".0%"},
            "showlegend": True,
            "legend": BOTTOM_LEGEND | {"y": -0.3},
            "hovermode": "closest",
            "template": "none",
        }
    )
    fig.add_trace(
        go.Scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            line={"color": REFERENCE_COLOR, "dash": "dot", "width": 1.5},
            name="random guess",
            hoverinfo="skip",
        )
    )
    if audit is not None:
        fpr, tpr = audit_curve(audit)
        fig.add_trace(
            go.Scatter(
                x=fpr,
                y=tpr,
                mode="lines",
                line={"color": AUDIT_COLOR, "dash": "dash", "width": 1.5},
                name=f"audit's lower bound ε̂ = {float(audit['epsilon']):.3g}",
                hovertemplate="audit ε̂: FPR %{x:.2%} → TPR %{y:.2%}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=list(bound.fpr),
            y=list(bound.tpr),
            mode="lines",
            line={"color": color, "width": 2.5},
            fill="tozeroy",
            fillcolor=rgba(color, 0.12),
            name=f"highest any attack can reach ({by})",
            hovertemplate="FPR %{x:.3%} → TPR at most %{y:.3%}<extra></extra>",
        )
    )
    caught = bound.tpr_at(ACCUSED)
    fig.add_trace(
        go.Scatter(
            x=[ACCUSED],
            y=[caught],
            mode="markers",
            marker={"color": color, "size": 9, "line": {"color": "white", "width": 1}},
            name=f"at 1% false positives: at most {percent_up(caught)} caught",
            hovertemplate="FPR 1% → TPR at most %{y:.3%}<extra></extra>",
        )
    )
    fig.layout.annotations += (
        {
            "x": ACCUSED,
            "y": caught,
            "xref": "x",
            "yref": "y",
            "text": f"1% accused → at most {percent_up(caught)} caught",
            "showarrow": True,
            "arrowhead": 2,
            "arrowcolor": color,
            "axref": "x",
            "ayref": "y",
            "ax": LABEL_AT[0],
            "ay": LABEL_AT[1],
            "xanchor": "left",
            "font": {"color": color, "size": 12},
            "bgcolor": "rgba(255,255,255,0.75)",
        },
    )
    return fig

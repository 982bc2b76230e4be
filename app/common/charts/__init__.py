"""Plotly figure builders, pure functions from data frames to figures, by subject: `base` (the base figure,
run colours, thinning, PNG export), `live` (a run's charts), `accountants` (ε by each accountant, the Plan
page's curves), `comparison` (the frontier and overlaid runs). Nothing is defined here."""

from app.common.charts.accountants import (
    accountant_color,
    accountant_label,
    epsilon_figure,
    plan_epsilon_figure,
    planned_epsilon_figure,
)
from app.common.charts.base import RUN_PALETTE, png_config, run_color, thin
from app.common.charts.comparison import runs_frontier_figure, runs_overlay_figure, sweep_frontier_figure
from app.common.charts.live import loss_figure, private_diagnostics_figure, regret_figure, run_accuracy_figure

__all__ = [
    "RUN_PALETTE",
    "accountant_color",
    "accountant_label",
    "epsilon_figure",
    "loss_figure",
    "plan_epsilon_figure",
    "planned_epsilon_figure",
    "png_config",
    "private_diagnostics_figure",
    "regret_figure",
    "run_accuracy_figure",
    "run_color",
    "runs_frontier_figure",
    "runs_overlay_figure",
    "sweep_frontier_figure",
    "thin",
]

"""The Sweep page's grid inputs: one or two parameters with their values, the seeds and a name, one
widget each with a one-sentence tooltip. Returns the grid spec, or the error that names the field."""

from dataclasses import dataclass
from typing import Any

import streamlit as st

from app import services
from app.common import run_panel
from app.common.safe_text import literal
from app.sweep.grid import SWEEPABLE, GridInputError, check_parameters, grid_spec, label, parse_values, seeds_from
from engine.jobs import settings
from engine.jobs.search import DEFAULT_SHAPE
from engine.jobs.sweep import MAX_SEEDS, SweepSubmission
from engine.privacy.selection import MAX_MEAN, TRIAL_DISTRIBUTION_TITLES, TrialDistribution
from engine.training import SpecError

NO_SECOND = ""
GRID, SEARCH = "grid", "search"
MODES = {GRID: "the best of a fixed grid", SEARCH: "the best of a private search"}
MODE_HELP = (
    "A fixed grid trains every point with every seed: releasing its best run costs the composition of all of "
    "them. A private search trains a random number of trials, each a grid point picked at random with a random "
    "seed; releasing its best run costs far less than the composition (Papernot & Steinke 2022), however many "
    "trials it draws."
)
VECTORIZE_HELP = (
    "Runs with the same data, model, lot size and epochs train as one stacked model that shares each step's "
    "Poisson lot, each run with its own noise: several times faster, and each run's ε is its own. Releasing the "
    "best of them costs more than of runs trained apart (they shared every lot): the cost is shown below."
)


@dataclass(frozen=True)
class GridChoice:
    spec: dict[str, Any] | None = None  # the grid spec to submit, when the inputs parse
    error: str | None = None  # else what is wrong, naming the field
    shape: str = ""  # "5 Target ε values × 2 seeds"


def base_caption(base: dict[str, Any]) -> str:
    privacy = [
        f"{name} {base[key]:g}"
        for key, name in (("target_epsilon", "target ε"), ("noise_multiplier", "σ"))
        if key in base
    ]
    parts = [run_panel.spec_caption(base), *privacy] + ([f"δ {base['delta']:g}"] if "delta" in base else [])
    return "Base configuration (in the sidebar): " + " · ".join(parts)


def _values_input(parameter: str, column) -> str:
    info = SWEEPABLE[parameter]
    return column.text_input(
        f"{info.label} values",
        value=info.default,
        key=f"sweep_values_{parameter}",
        help=f"Comma-separated numbers, one grid point each. {info.help}",
    )


def grid_inputs(base: dict[str, Any]) -> GridChoice:
    left, right = st.columns(2)
    first = left.selectbox(
        "Parameter along the frontier",
        list(SWEEPABLE),
        format_func=label,
        key="sweep_first",
        help="The parameter whose values are joined by a line on the frontier chart.",
    )
    first_text = _values_input(first, left)
    second = right.selectbox(
        "Second parameter (one line each)",
        [NO_SECOND, *SWEEPABLE],
        format_func=lambda key: "none" if key == NO_SECOND else label(key),
        key="sweep_second",
        help="Optional: every value of this parameter gets its own line, crossed with every value of the first.",
    )
    second_text = _values_input(second, right) if second not in (NO_SECOND, first) else ""
    mode = st.radio(
        "Release",
        list(MODES),
        format_func=MODES.get,
        key="sweep_mode",
        horizontal=True,
        help=MODE_HELP,
    )
    count_column, name_column = st.columns(2)
    search = search_inputs(count_column) if mode == SEARCH else None
    count = (
        count_column.number_input(
            "Seeds per point",
            min_value=1,
            max_value=MAX_SEEDS,
            value=2,
            key="sweep_seeds",
            help="Each grid point trains once per seed (counting up from the sidebar's first seed); the frontier "
            "shows their mean and spread.",
        )
        if search is None
        else 1
    )
    name = name_column.text_input(
        "Sweep name (optional)", key="sweep_name", max_chars=200, help="A name to find the sweep by later."
    )
    vectorize = st.checkbox(
        "Train compatible points together (vectorized)",
        value=True,
        key="sweep_vectorize",
        disabled=search is not None,
        help=VECTORIZE_HELP + " A private search's trials never stack: its analysis needs independent runs.",
    )
    try:
        check_parameters(first, second or None)
        grid = {first: parse_values(f"{label(first)} values", first_text, integer=SWEEPABLE[first].integer)}
        if second != NO_SECOND:
            grid[second] = parse_values(f"{label(second)} values", second_text, integer=SWEEPABLE[second].integer)
        seeds = seeds_from(int(base.get("seed", 0)), int(count))
    except GridInputError as exc:
        return GridChoice(error=str(exc))
    shape = " × ".join(f"{len(values)} {label(key)} values" for key, values in grid.items())
    if search is not None:
        spec = grid_spec(base, grid, [], name or "", search=search) | {"vectorize": vectorize}
        return GridChoice(spec=spec, shape=shape)
    shape += f" × {len(seeds)} seed{'s' * (len(seeds) > 1)}"
    return GridChoice(spec=grid_spec(base, grid, seeds, name or "") | {"vectorize": vectorize}, shape=shape)


def search_inputs(column) -> dict[str, Any]:
    """The number of trials of a private search: its distribution, mean and (negative binomial) shape."""
    distribution = column.selectbox(
        "Number of trials",
        list(TRIAL_DISTRIBUTION_TITLES),
        index=list(TRIAL_DISTRIBUTION_TITLES).index(TrialDistribution.NEGATIVE_BINOMIAL),
        format_func=lambda d: f"{TRIAL_DISTRIBUTION_TITLES[d]} distribution",
        key="sweep_trial_distribution",
        help="How the random number of trials is drawn (Papernot & Steinke 2022). Heavier tails (logarithmic, "
        "negative binomial with small η) cost less ε for the same mean, but now and then draw many trials.",
    )
    mean = column.number_input(
        "Mean number of trials",
        min_value=1.0,
        max_value=MAX_MEAN,
        value=8.0,
        step=1.0,
        key="sweep_trial_mean",
        help="Trials on average: more trials find a better configuration, and cost more ε (about log of the mean).",
    )
    search: dict[str, Any] = {"distribution": TrialDistribution(distribution).value, "mean": float(mean)}
    if distribution == TrialDistribution.NEGATIVE_BINOMIAL:
        search["shape"] = column.number_input(
            "Shape η",
            min_value=0.01,
            max_value=100.0,
            value=DEFAULT_SHAPE,
            step=0.1,
            key="sweep_trial_shape",
            help="η = 1 is the geometric distribution, η → 0 the logarithmic; a smaller η costs less ε.",
        )
    return search


def preview_text(choice: GridChoice, preview: services.SweepPreview) -> str:
    if preview.search is not None:
        return (
            f"**A private search** over {preview.configurations} configurations ({choice.shape}): "
            f"a {preview.search.describe()} drawn at launch, each trial one configuration picked at random with a "
            "random seed. The number drawn and the trials stay in the lab: only the best is meant for release."
        )
    to_train = preview.runs - preview.cached - preview.active
    return (
        f"**{preview.runs} runs** ({choice.shape}); {preview.cached} already cached, {preview.active} already "
        f"queued or running: **{to_train} to train**."
    )


def launched_text(submission: SweepSubmission, *, vectorize: bool) -> str:
    """The confirmation after a launch: what was queued (and how much of it in vectorized stacks), what the store
    already had."""
    queued = f"{submission.created} run{'s' * (submission.created != 1)} queued"
    if submission.stacks:
        queued += (
            f", {submission.stacked} of them in {submission.stacks} vectorized "
            f"stack{'s' * (submission.stacks > 1)} (K ≤ {settings.stack_max()})"
        )
    elif vectorize and submission.created > 1:
        queued += " (none in a vectorized stack: only DP-SGD runs with the same data, model, lot size and epochs stack)"
    return (
        f"Sweep `{submission.sweep_id}` launched: {queued}; {submission.cached} from the cache, "
        f"{submission.existing} already queued or running."
    )


def launch(choice: GridChoice, problem: str | None) -> None:
    """The launch button: queue the grid (a problem disables it) and show the sweep launched in the results."""
    launch_help = "Queue every grid point for the background workers; points already trained come from the cache."
    if st.button("Launch sweep", type="primary", key="sweep_launch", disabled=problem is not None, help=launch_help):
        try:
            submission = services.launch_sweep(choice.spec)
        except SpecError as exc:
            st.error(f"Cannot launch this sweep: {literal(exc)}")
        else:
            st.session_state["sweep_shown"] = submission.sweep_id
            st.success(launched_text(submission, vectorize=choice.spec["vectorize"]))

"""The Runs page's search and filters: a run's readable name or id, its dataset, model and algorithm, the ε it
spent, its status and the day it was created. `RunFilter.keeps` is the pure rule; `filter_form` draws the widgets.

The ε range reads the ε a finished run spent: a finished non-private run spent ∞ (no ε bounds it), so a lower
bound alone keeps it and any upper bound leaves it out; a run that has not finished has spent no final ε yet and
is left out as soon as either bound is set."""

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

import streamlit as st

from app.common.labels import algorithm_title, dataset_label, is_private, model_title
from app.common.results import finite_epsilon
from cache import RunRecord, RunStatus

EPSILON_RANGE_HELP = (
    "The ε a finished run spent (its tightest accountant). A non-private run spent ∞: a lower bound alone keeps "
    "it, an upper bound leaves it out. Runs that have not finished are left out once a bound is set."
)


def algorithm_of(run: RunRecord) -> str:
    """The run's algorithm key (DP-SGD when its spec names none)."""
    algorithm = run.spec.get("algorithm")
    return algorithm if isinstance(algorithm, str) else "dpsgd"


def model_of(run: RunRecord) -> str:
    model = run.spec.get("model")
    return model if isinstance(model, str) else "?"


def spent_epsilon(run: RunRecord) -> float | None:
    """The ε a finished run spent: its finite bound, ∞ for a non-private run (or a private one with no finite
    bound); None for a run that has not finished."""
    if run.status is not RunStatus.FINISHED:
        return None
    epsilon = finite_epsilon(run) if is_private(run.spec) else None
    return math.inf if epsilon is None else epsilon


def created_day(run: RunRecord) -> dt.date | None:
    """The local day a run was created (None for a time no calendar holds)."""
    try:
        return dt.datetime.fromtimestamp(run.created_at).date()
    except (OverflowError, OSError, ValueError, TypeError):
        return None


@dataclass(frozen=True, kw_only=True)
class RunFilter:
    """What the runs listed must match; an empty field matches every run."""

    text: str = ""  # a case-insensitive part of the run's readable name or of its id
    statuses: tuple[str, ...] = ()  # status values
    datasets: tuple[str, ...] = ()  # as the user knows them (`dataset_label`)
    models: tuple[str, ...] = ()
    algorithms: tuple[str, ...] = ()  # algorithm keys
    epsilon_low: float | None = None
    epsilon_high: float | None = None
    created_from: dt.date | None = None
    created_to: dt.date | None = None

    def keeps(self, run: RunRecord, name: str) -> bool:
        """Whether `run` (whose readable name is `name`) matches every field."""
        wanted = self.text.strip().casefold()
        if wanted and wanted not in name.casefold() and wanted not in run.id.casefold():
            return False
        if self.statuses and run.status.value not in self.statuses:
            return False
        if self.datasets and dataset_label(run.spec.get("dataset")) not in self.datasets:
            return False
        if self.models and model_of(run) not in self.models:
            return False
        if self.algorithms and algorithm_of(run) not in self.algorithms:
            return False
        if self.epsilon_low is not None or self.epsilon_high is not None:
            epsilon = spent_epsilon(run)
            if epsilon is None:
                return False
            if self.epsilon_low is not None and epsilon < self.epsilon_low:
                return False
            if self.epsilon_high is not None and epsilon > self.epsilon_high:
                return False
        if self.created_from is not None or self.created_to is not None:
            day = created_day(run)
            if day is None:
                return False
            if self.created_from is not None and day < self.created_from:
                return False
            if self.created_to is not None and day > self.created_to:
                return False
        return True


def filter_form(runs: Sequence[RunRecord]) -> RunFilter:
    """The search box and filters (their choices from `runs`), read into a `RunFilter`."""
    text = st.text_input(
        "Search runs",
        key="runs_search",
        placeholder="Part of a run's name or id",
        help="Show the runs whose readable name (the one you gave it, else data · model · privacy · seed) or id "
        "contains this text, in any case.",
    )
    status_column, data_column, model_column, algorithm_column = st.columns(4)
    statuses = status_column.multiselect(
        "Statuses",
        [s.value for s in RunStatus],
        key="runs_filter",
        placeholder="All statuses",
        help="Show only runs in these statuses; none picked shows every run.",
    )
    datasets = data_column.multiselect(
        "Datasets",
        sorted({dataset_label(r.spec.get("dataset")) for r in runs}),
        key="runs_datasets",
        placeholder="All datasets",
        help="Show only runs trained on these datasets; none picked shows every dataset.",
    )
    models = model_column.multiselect(
        "Models",
        sorted({model_of(r) for r in runs}),
        key="runs_models",
        format_func=model_title,
        placeholder="All models",
        help="Show only runs of these models; none picked shows every model.",
    )
    algorithms = algorithm_column.multiselect(
        "Algorithms",
        sorted({algorithm_of(r) for r in runs}),
        key="runs_algorithms",
        format_func=algorithm_title,
        placeholder="All algorithms",
        help="Show only runs trained with these algorithms; none picked shows every algorithm.",
    )
    low_column, high_column, from_column, to_column = st.columns(4)
    low = low_column.number_input(
        "ε spent at least",
        min_value=0.0,
        value=None,
        key="runs_epsilon_low",
        placeholder="any",
        help=EPSILON_RANGE_HELP,
    )
    high = high_column.number_input(
        "ε spent at most",
        min_value=0.0,
        value=None,
        key="runs_epsilon_high",
        placeholder="any",
        help=EPSILON_RANGE_HELP,
    )
    created_from = from_column.date_input(
        "Created from", value=None, key="runs_created_from", help="Show only runs created on or after this day."
    )
    created_to = to_column.date_input(
        "Created until", value=None, key="runs_created_to", help="Show only runs created on or before this day."
    )
    return RunFilter(
        text=text or "",
        statuses=tuple(statuses),
        datasets=tuple(datasets),
        models=tuple(models),
        algorithms=tuple(algorithms),
        epsilon_low=low,
        epsilon_high=high,
        created_from=created_from if isinstance(created_from, dt.date) else None,
        created_to=created_to if isinstance(created_to, dt.date) else None,
    )

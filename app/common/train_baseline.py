"""The reference lines of a run's accuracy chart: a finished non-private run of the same dataset and model from
the store, the majority class's accuracy (the floor), and scikit-learn's logistic regression, fitted only when
asked for."""

import streamlit as st

from app import services
from app.common.safe_text import literal
from cache import RunRecord
from engine.training import DATASETS, DatasetError

SKLEARN_LABEL = "scikit-learn logistic regression"


def _asked_key(dataset: str) -> str:
    return f"train_sklearn_baseline::{dataset}"


def _ask(dataset: str) -> None:
    st.session_state[_asked_key(dataset)] = True


def _dataset(run: RunRecord) -> str:
    dataset = run.spec.get("dataset", "")
    return dataset if isinstance(dataset, str) else ""


def references(run: RunRecord) -> list[tuple[str, float]]:
    """(label, test accuracy) of each non-private reference for this run's chart."""
    spec, found = run.spec, []
    if spec.get("algorithm") != "nonprivate" and (baseline := services.nonprivate_baseline(spec)) is not None:
        found.append((baseline.label, baseline.test_accuracy))
    dataset = _dataset(run)
    # The majority class's accuracy, from public test labels (no ε needed), once the run has ended: reading a
    # dataset's labels takes a second or two on MNIST, which a live run's first point must not wait for.
    if not run.status.active and (floor := majority_floor(dataset)) is not None:
        found.append(floor)
    if dataset and st.session_state.get(_asked_key(dataset)):
        try:
            fitted = services.sklearn_baseline(dataset, tuple(services.data_directories()))
        except (DatasetError, OSError, ValueError) as exc:
            st.error(f"The scikit-learn baseline could not be computed: {literal(exc)}")
            st.session_state.pop(_asked_key(dataset), None)
        else:
            found.append((SKLEARN_LABEL, fitted.test_accuracy))
    return found


def majority_floor(dataset: object) -> tuple[str, float] | None:
    """(label, accuracy) of always answering the most common test label, for a registered dataset whose files
    are here; None otherwise, or when they do not read (the chart goes without it; training reports the error)."""
    if not isinstance(dataset, str) or dataset not in DATASETS or services.missing_dataset_files(dataset):
        return None
    try:
        floor = services.majority_class_accuracy(dataset, tuple(services.data_directories()))
    except (DatasetError, OSError, ValueError):
        return None
    return floor.label, floor.test_accuracy


def offer(run: RunRecord, shown: list[tuple[str, float]]) -> None:
    """A button that fits the scikit-learn baseline of the run's dataset (registered datasets whose files are
    here), unless it is drawn already. Nothing is computed until it is pressed."""
    dataset = _dataset(run)
    if dataset not in DATASETS or any(label == SKLEARN_LABEL for label, _ in shown):
        return
    missing = services.missing_dataset_files(dataset)
    st.button(
        "Compute scikit-learn's baseline"
        if run.spec.get("algorithm") == "nonprivate"
        else "Compute the non-private baseline",
        key=f"baseline-{run.id}",
        on_click=_ask,
        args=(dataset,),
        disabled=bool(missing),
        icon=":material/horizontal_rule:",
        help="Fits scikit-learn's logistic regression on the same training split without any privacy and draws "
        "its test accuracy on the accuracy chart: seconds on Digits and Adult, minutes on MNIST."
        + (" The dataset's files are not here." if missing else ""),
    )

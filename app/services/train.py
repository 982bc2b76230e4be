"""The Train page's services: the plan preview of a spec, submitting it, dataset files and baselines."""

import contextlib
import json
from dataclasses import dataclass

import numpy as np
import streamlit as st

from app.services.plan import pld_steps
from app.services.store import get_store, run_names
from cache import RunStatus, StoreError
from engine.jobs import submission
from engine.jobs.naming import generated_run_name
from engine.jobs.settings import default_data_dirs
from engine.jobs.submission import Submission, submit
from engine.privacy import (
    PrivacyError,
    accountant,
    rdp_curve,
)
from engine.training import DatasetError, SpecError, parse_spec, plan_spec
from engine.training.config.plan import budget_fill_text
from engine.training.config.reach import spec_coordinates
from engine.training.config.spec import spec_dataset_info
from engine.training.datasets import DATASETS
from engine.training.models.wide_resnet import DEFAULT_DEPTH, DEFAULT_WIDTH


@dataclass(frozen=True)
class PlanPreview:
    """What a spec implies before anything trains, or the error that stops it from training."""

    error: str | None = None
    error_field: str | None = None  # the spec key the error names (`SpecError.field`), None when it names none
    steps: int = 0
    sampling_rate: float = 0.0
    noise_multiplier: float = 0.0
    epsilon: float = 0.0
    best_order: float = 0.0
    n_train: int = 0
    private: bool = True
    learner_parameters: tuple[tuple[str, float], ...] = ()  # a textbook learner's mechanism parameters
    curve_steps: tuple[int, ...] = ()  # ε (RDP) after each of these steps: the planned curve
    curve_epsilons: tuple[float, ...] = ()
    calibrated_by: str | None = None  # the accountant σ was calibrated by (a target ε), None when σ was given
    pld_curve_steps: tuple[int, ...] = ()  # ε by PLD after each of these steps, when PLD calibrated σ
    pld_curve_epsilons: tuple[float, ...] = ()
    canonical: str = ""  # the validated spec's canonical JSON: equal for two specs that train the same run
    filled: str | None = None  # how the steps were filled from a budget (`budget_fill_text`), None when not

    @property
    def pld_epsilon(self) -> float | None:
        """ε by PLD after the whole run, when PLD calibrated σ (the PLD curve ends at the last step)."""
        return self.pld_curve_epsilons[-1] if self.pld_curve_epsilons else None


PREVIEW_CURVE_POINTS = 60


@st.cache_data(show_spinner="Calibrating σ…", max_entries=512)
def preview_plan(spec_json: str) -> PlanPreview:
    try:
        spec = parse_spec(json.loads(spec_json))
        plan = plan_spec(spec)
        if not plan.private:
            return PlanPreview(
                steps=plan.steps,
                sampling_rate=plan.sampling_rate,
                n_train=plan.n_train,
                private=False,
                canonical=spec.canonical_json(),
            )
        grid = np.unique(np.linspace(0, plan.steps, PREVIEW_CURVE_POINTS).round().astype(np.int64))
        rdp = rdp_curve(plan.ledger(), delta=plan.delta, steps=grid)
        eps, order = rdp.final_epsilon, rdp.final_order
        by_pld = None
        if "pld" in (plan.calibrated_by, plan.filled_by):  # the curve that meets the target: PLD's (~1 s)
            by_pld = accountant("pld").curve(plan.ledger(), delta=plan.delta, steps=pld_steps(plan.steps))
    except SpecError as exc:
        return PlanPreview(error=str(exc), error_field=exc.field)
    except (DatasetError, PrivacyError) as exc:
        return PlanPreview(error=str(exc))
    return PlanPreview(
        steps=plan.steps,
        sampling_rate=plan.sampling_rate,
        noise_multiplier=plan.noise_multiplier or 0.0,
        learner_parameters=plan.learner_parameters,
        epsilon=eps,
        best_order=order,
        n_train=plan.n_train,
        curve_steps=tuple(map(int, rdp.steps)),
        curve_epsilons=tuple(map(float, rdp.epsilons)),
        calibrated_by=plan.calibrated_by,
        pld_curve_steps=tuple(map(int, by_pld.steps)) if by_pld else (),
        pld_curve_epsilons=tuple(map(float, by_pld.epsilons)) if by_pld else (),
        canonical=spec.canonical_json(),
        filled=budget_fill_text(plan.summary()),
    )


@st.cache_data(max_entries=64)
def canonical_spec(spec_json: str) -> str | None:
    """A stored run's spec as canonical JSON (what `PlanPreview.canonical` holds for the form), None if invalid."""
    try:
        return parse_spec(json.loads(spec_json)).canonical_json()
    except (SpecError, DatasetError, ValueError):
        return None


@st.cache_data(max_entries=64)
def model_coordinates(spec_json: str) -> int | None:
    """The trainable coordinates of the model a raw spec trains (its `audit` left out: gradient canaries take one
    each), None when the spec is invalid without it."""
    try:
        spec = parse_spec({key: value for key, value in json.loads(spec_json).items() if key != "audit"})
        return spec_coordinates(spec, spec_dataset_info(spec))
    except (SpecError, DatasetError, ValueError):
        return None


def submit_spec(raw: dict) -> Submission:
    """Queue a spec with the σ its preview calibrated (the worker confirms it instead of searching again)."""
    preview = preview_plan(json.dumps(raw, sort_keys=True))
    planned = (preview.noise_multiplier or None) if preview.error is None and preview.private else None
    return submit(get_store(), parse_spec(raw), planned_noise_multiplier=planned)


FIRST_STEP_WAIT_S = 1.5  # after Train, the redraw waits this long at most for the run's first step (~0.5 s on a CPU)
UNCLAIMED_WAIT_S = 0.5  # … and gives up sooner while no worker has claimed the run (all busy, or none running)


def await_first_step(run_id: str) -> None:
    """Right after a submission: let the redraw that shows the new run plot its first step (see
    `engine.jobs.submission.await_first_step`)."""
    with contextlib.suppress(StoreError):  # deleted meanwhile: the run panel says so
        submission.await_first_step(get_store(), run_id, timeout_s=FIRST_STEP_WAIT_S, unclaimed_s=UNCLAIMED_WAIT_S)


def data_directories() -> list[str]:
    """Where datasets are looked for, in order (`DPLAB_DATA_DIR`, then the data home's download folder)."""
    return [str(d) for d in default_data_dirs()]


def missing_dataset_files(name: str) -> list[str]:
    """The files of a registered dataset found in no data directory (relative paths); [] when it is built in
    or all its files are here (looked up only: training verifies each file's SHA-256)."""
    info = DATASETS.get(name)
    return info.missing_files(default_data_dirs()) if info else []


@dataclass(frozen=True)
class Baseline:
    """A non-private reference accuracy for a private run's chart."""

    label: str
    test_accuracy: float


BASELINE_SEARCH = 200  # newest finished runs looked through (one indexed query per poll of a live run)


def nonprivate_baseline(spec: dict) -> Baseline | None:
    """The newest finished non-private run of the same architecture (`_architecture`), among the newest
    `BASELINE_SEARCH` finished runs. Not cached: a baseline that finishes shows up at once."""
    wanted = _architecture(spec)
    for run in get_store().list_runs(limit=BASELINE_SEARCH, statuses=[RunStatus.FINISHED]):
        other = run.spec
        found = _architecture(other)
        accuracy = (run.result or {}).get("test_accuracy")
        if other.get("algorithm") == "nonprivate" and found == wanted and _positive_number(accuracy):
            name = run_names().get(run.id) or generated_run_name(run.spec)
            return Baseline(label=f"non-private run “{name}”", test_accuracy=float(accuracy))
    return None


def _architecture(spec: dict) -> tuple:
    """What makes two runs the same model: dataset, model, its shape (hidden widths, the wide ResNet's depth and
    width) and the features it reads."""
    shape = (
        (spec.get("wrn_depth", DEFAULT_DEPTH), spec.get("wrn_width", DEFAULT_WIDTH))
        if spec.get("model") == "wrn"
        else ()
    )
    return (spec.get("dataset"), spec.get("model"), spec.get("hidden"), *shape, spec.get("features", "pixels"))


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")


@st.cache_data(show_spinner="Fitting scikit-learn's logistic regression on the training split…", max_entries=16)
def sklearn_baseline(dataset: str, data_dirs: tuple[str, ...]) -> Baseline:
    """scikit-learn's non-private logistic regression on the dataset's features (DatasetError if its files
    are missing). Seconds on Digits and Adult, minutes on the 60,000 MNIST images."""
    from pathlib import Path

    from engine.training.algorithms.baselines import sklearn_logistic_regression  # scikit-learn loads only when asked
    from engine.training.datasets import load_dataset

    result = sklearn_logistic_regression(load_dataset(dataset, [Path(d) for d in data_dirs]))
    return Baseline(label="non-private scikit-learn logistic regression", test_accuracy=result.test_accuracy)


@st.cache_data(show_spinner="Reading the test labels…", max_entries=16)
def majority_class_accuracy(dataset: str, data_dirs: tuple[str, ...]) -> Baseline:
    """The test accuracy of always answering the most common test label: the floor any model must beat. Read
    from the public test split of a registered dataset (DatasetError if its files are missing)."""
    from pathlib import Path

    from engine.training.datasets import load_dataset

    labels = np.asarray(load_dataset(dataset, [Path(d) for d in data_dirs]).y_test)
    counts = np.unique(labels, return_counts=True)[1]
    return Baseline(label="majority class", test_accuracy=float(counts.max() / counts.sum()))

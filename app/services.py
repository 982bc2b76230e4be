"""Store access and every Streamlit cache decorator of the app, in one place.

Reads never wait on a worker: SQLite in WAL mode lets the dashboard read while workers write.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from app import data_catalog, data_upload
from cache import RunEvent, RunRecord, RunStatus, Store, StoreError, SweepRecord, data_home, datasets_dir, store_path
from cache.archive.format import ArchiveError
from cache.store.maintenance import check_deletable, delete_runs, folder_bytes, size_report, store_bytes
from engine import ENGINE_VERSION, api
from engine.jobs.queue import Submission, answer_from_store, submit
from engine.jobs.settings import default_data_dirs, stale_after_s
from engine.jobs.sweep import MAX_RUNS, SweepError, SweepSubmission, expand_sweep, submit_sweep
from engine.jobs.transfer import Export, ImportReport, import_runs, prepare_export, summarize_archive
from engine.privacy import (
    ACCOUNTANTS,
    UNBOUNDED_EPSILON,
    Panel,
    PrivacyError,
    PrivacyLedger,
    accountant,
    calibrate_noise_multiplier,
    dpsgd_step_event,
    panel,
    privacy_statement,
    rdp_curve,
    single_phase,
)
from engine.privacy.planning import MAX_PLAN_STEPS, MAX_TRAINING_STEPS, sampling_rate
from engine.training import DATASETS, DatasetError, SpecError, dataset_info, parse_spec, plan_spec, steps_for
from engine.training.datasets import DatasetInfo


def get_store() -> Store:
    return _store_at(str(store_path()))


@st.cache_resource
def _store_at(path: str) -> Store:
    return Store(path)


@dataclass(frozen=True)
class PlanPreview:
    """What a spec implies before anything trains, or the error that stops it from training."""

    error: str | None = None
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
    pld_epsilon: float | None = None  # ε by PLD, when PLD calibrated σ
    pld_curve_steps: tuple[int, ...] = ()  # ε by PLD after each of these steps, when PLD calibrated σ
    pld_curve_epsilons: tuple[float, ...] = ()


PREVIEW_CURVE_POINTS = 60


@st.cache_data(show_spinner="Calibrating σ…", max_entries=512)
def preview_plan(spec_json: str) -> PlanPreview:
    try:
        spec = parse_spec(json.loads(spec_json))
        plan = plan_spec(spec)
        if not plan.private:
            return PlanPreview(steps=plan.steps, sampling_rate=plan.sampling_rate, n_train=plan.n_train, private=False)
        grid = np.unique(np.linspace(0, plan.steps, PREVIEW_CURVE_POINTS).round().astype(np.int64))
        rdp = rdp_curve(plan.ledger(), delta=plan.delta, steps=grid)
        eps, order = rdp.final_epsilon, rdp.final_order
        by_pld = None
        if plan.calibrated_by == "pld":  # the curve that meets the target: PLD's, on a coarse grid (~1 s)
            by_pld = accountant("pld").curve(plan.ledger(), delta=plan.delta, steps=pld_steps(plan.steps))
    except (SpecError, DatasetError, PrivacyError) as exc:
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
        pld_epsilon=by_pld.final_epsilon if by_pld else None,
        pld_curve_steps=tuple(map(int, by_pld.steps)) if by_pld else (),
        pld_curve_epsilons=tuple(map(float, by_pld.epsilons)) if by_pld else (),
    )


def submit_spec(raw: dict) -> Submission:
    """Queue a spec with the σ its preview calibrated (the worker confirms it instead of searching again)."""
    preview = preview_plan(json.dumps(raw, sort_keys=True))
    planned = (preview.noise_multiplier or None) if preview.error is None and preview.private else None
    return submit(get_store(), parse_spec(raw), planned_noise_multiplier=planned)


def get_run(run_id: str) -> RunRecord | None:
    try:
        return get_store().get_run(run_id)
    except StoreError:
        return None


def recent_runs(limit: int = 200) -> list[RunRecord]:
    return get_store().list_runs(limit=limit)


def latest_active_run() -> RunRecord | None:
    active = get_store().list_runs(limit=1, statuses=[RunStatus.RUNNING, RunStatus.QUEUED])
    return active[0] if active else None


def worker_health() -> list[dict]:
    """Workers registered as running, with the age of their last heartbeat and whether it is stale."""
    now, stale = time.time(), stale_after_s()
    return [
        {
            "worker": w.name,
            "backend": w.backend,
            "device": w.device or "",
            "current run": w.current_run or "",
            "last heartbeat": f"{now - w.heartbeat_at:.0f} s ago",
            "healthy": w.alive(now=now, stale_after_s=stale),
        }
        for w in get_store().list_workers()
    ]


def heartbeat_age(run: RunRecord) -> float | None:
    """Seconds since a running run's worker last reported, None for runs that are not running."""
    if run.status is not RunStatus.RUNNING or run.heartbeat_at is None:
        return None
    return time.time() - run.heartbeat_at


def cancel_run(run_id: str) -> RunStatus:
    return get_store().request_cancel(run_id)


def metrics_frame(run_id: str) -> pd.DataFrame:
    """Per-step metrics of a run, one row per step, one column per metric (the notebook API's frame)."""
    return api.metrics(run_id, store=get_store())


# --- Plan: what a DP-SGD schedule costs in privacy, before anything trains ---------------------------------------

PLOT_POINTS = 200  # RDP and the composition theorems: microseconds a point once the per-step profile is known
PLD_LINEAR_POINTS, PLD_GEOMETRIC_POINTS = 8, 5  # PLD costs ~0.1–0.5 s a point: a coarse grid, denser early
EPSILON_WARNING = 10.0  # a larger ε is a weak guarantee: the Plan page says so


def builtin_dataset_sizes() -> dict[str, tuple[str, int]]:
    """Each built-in dataset's title and training-set size N (public facts, nothing is loaded)."""
    return {name: (info.title, info.n_train) for name, info in DATASETS.items()}


@dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """A Poisson DP-SGD schedule as the Plan page asks for it."""

    dataset_size: int
    epochs: int
    delta: float
    lot_size: int | None = None  # expected lot size L (q = L/N), or
    sampling_rate: float | None = None  # q itself
    target_epsilon: float | None = None  # σ is calibrated to meet this, or
    noise_multiplier: float | None = None  # σ is given


@dataclass(frozen=True, kw_only=True)
class PrivacyPlan:
    """What a schedule implies (σ by RDP, T, q, ε by RDP), or the error that stops it from running."""

    settings: PlanSettings
    error: str | None = None
    sampling_rate: float = 0.0
    steps: int = 0
    noise_multiplier: float = 0.0
    rdp_epsilon: float = 0.0
    best_order: float = 0.0
    order_at_edge: bool = False

    @property
    def calibrated(self) -> bool:
        return self.settings.target_epsilon is not None

    @property
    def expected_lot_size(self) -> float:
        return self.sampling_rate * self.settings.dataset_size

    def ledger(self) -> PrivacyLedger:
        event = dpsgd_step_event(sampling_rate=self.sampling_rate, noise_multiplier=self.noise_multiplier)
        return single_phase(event, self.steps)


def _schedule(settings: PlanSettings) -> tuple[float, int]:
    """(q, T) of the settings, or PrivacyError saying which input is out of range."""
    n = settings.dataset_size
    if int(n) != n or n < 1:
        raise PrivacyError(f"dataset size N must be a whole number ≥ 1, got {n}")
    if not settings.epochs > 0:
        raise PrivacyError(f"epochs must be > 0, got {settings.epochs}")
    if settings.lot_size is not None:
        if not 1 <= settings.lot_size <= n:
            raise PrivacyError(f"lot size L = {settings.lot_size:,} must lie in [1, N = {n:,}] (q = L/N ≤ 1)")
        q = sampling_rate(lot_size=settings.lot_size, n_train=n)
        steps = steps_for(epochs=settings.epochs, n_train=n, lot_size=settings.lot_size)
    else:
        q = settings.sampling_rate
        if q is None or not 0 < q <= 1:
            raise PrivacyError(f"sampling rate q must lie in (0, 1], got {q}")
        steps = steps_for(epochs=settings.epochs, n_train=n, lot_size=q * n)
    if steps > MAX_PLAN_STEPS:
        raise PrivacyError(
            f"T = {steps:,} steps: this page plans at most {MAX_PLAN_STEPS:,} (raise L or q, or train fewer epochs)"
        )
    return q, steps


@st.cache_data(show_spinner="Calibrating σ…", max_entries=256)
def rdp_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float, steps: int) -> float:
    return calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps
    )


def privacy_plan(settings: PlanSettings) -> PrivacyPlan:
    """σ calibrated by RDP (what the Train page does) or as given, T, q and the final ε by RDP: fast."""
    try:
        if not 0 < settings.delta < 1:
            raise PrivacyError(f"δ must lie strictly between 0 and 1, got {settings.delta:g}")
        q, steps = _schedule(settings)
        if settings.target_epsilon is not None:
            sigma = rdp_noise_multiplier(settings.target_epsilon, settings.delta, q, steps)
        else:
            sigma = float(settings.noise_multiplier or 0.0)
        plan = PrivacyPlan(settings=settings, sampling_rate=q, steps=steps, noise_multiplier=sigma)
        rdp = rdp_curve(plan.ledger(), delta=settings.delta, steps=[steps])
    except PrivacyError as exc:
        return PrivacyPlan(settings=settings, error=str(exc))
    return PrivacyPlan(
        settings=settings,
        sampling_rate=q,
        steps=steps,
        noise_multiplier=sigma,
        rdp_epsilon=rdp.final_epsilon,
        best_order=rdp.final_order,
        order_at_edge=rdp.order_at_edge,
    )


def plot_steps(total_steps: int, points: int = PLOT_POINTS) -> np.ndarray:
    """Up to `points` evenly spaced step counts from 1 to T, ending at T."""
    return np.unique(np.linspace(1, total_steps, min(points, total_steps)).round().astype(np.int64))


def pld_steps(total_steps: int) -> np.ndarray:
    """A coarse grid for PLD: evenly spaced points plus geometric ones early, where ε grows fastest; ends at T."""
    if total_steps <= PLD_LINEAR_POINTS + PLD_GEOMETRIC_POINTS:
        return np.arange(1, total_steps + 1, dtype=np.int64)
    grid = np.concatenate(
        [np.linspace(1, total_steps, PLD_LINEAR_POINTS), np.geomspace(1, total_steps, PLD_GEOMETRIC_POINTS)]
    )
    return np.unique(grid.round().astype(np.int64))


@st.cache_data(show_spinner="Computing PLD and the composition bounds (a few seconds, then cached)…", max_entries=128)
def accountant_panel(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> Panel:
    """Every accountant's ε after 1..T Poisson DP-SGD steps: PLD on a coarse grid, the others on a fine one.
    Each curve ends at T, so `final()` is every accountant's ε for the whole run."""
    ledger = single_phase(dpsgd_step_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier), steps)
    curves, missing = {}, {}
    for name in ACCOUNTANTS:
        grid = pld_steps(steps) if name == "pld" else plot_steps(steps)
        part = panel(ledger, delta=delta, names=(name,), steps=grid)
        curves |= part.curves
        missing |= part.not_applicable
    return Panel(delta=delta, curves=curves, not_applicable=missing)


def plan_panel(plan: PrivacyPlan) -> Panel:
    return accountant_panel(plan.sampling_rate, plan.noise_multiplier, plan.steps, plan.settings.delta)


@st.cache_data(show_spinner="Calibrating σ by PLD (a few seconds)…", max_entries=128)
def pld_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float, steps: int) -> float:
    return calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps, accountant_name="pld"
    )


def plan_pld_sigma(plan: PrivacyPlan) -> float | str:
    """σ calibrated by the tighter PLD accountant for the plan's target ε, or why there is none."""
    try:
        return pld_noise_multiplier(plan.settings.target_epsilon, plan.settings.delta, plan.sampling_rate, plan.steps)
    except PrivacyError as exc:
        return str(exc)


def _statement_lot_size(plan: PrivacyPlan) -> int | float:
    """L as the statement prints it: q = L/N must come out as the q that runs (6 significant digits)."""
    if plan.settings.lot_size is not None:
        return plan.settings.lot_size
    lot = float(f"{plan.expected_lot_size:.6g}")
    return int(lot) if lot.is_integer() else lot


def plan_statement(plan: PrivacyPlan, accounts: Panel) -> tuple[str, ...]:
    """The privacy statement a run with these settings would carry."""
    return privacy_statement(
        ledger=plan.ledger(),
        panel=accounts,
        dataset_size=plan.settings.dataset_size,
        lot_size=_statement_lot_size(plan),
    ).lines


def plan_warnings(plan: PrivacyPlan, accounts: Panel) -> list[str]:
    """What makes this plan's guarantee weak or its numbers loose."""
    n, delta = plan.settings.dataset_size, plan.settings.delta
    name, epsilon = accounts.tightest()
    warnings = []
    if delta >= 1 / n:
        warnings.append(
            f"δ = {delta:.3g} ≥ 1/N = {1 / n:.3g}: a mechanism that publishes one random record in full meets this "
            f"δ. Choose δ well below 1/N, e.g. 1/(10N) = {1 / (10 * n):.2g} or smaller."
        )
    if epsilon > EPSILON_WARNING:
        warnings.append(
            f"ε = {epsilon:.3g} (by {ACCOUNTANTS[name].short}) is above {EPSILON_WARNING:g}: the guarantee is weak "
            "(e^ε bounds how much more likely any outcome becomes). Raise σ or train fewer epochs."
        )
    if plan.steps > MAX_TRAINING_STEPS:
        warnings.append(
            f"T = {plan.steps:,} steps is more than the {MAX_TRAINING_STEPS:,} a training run may take here: raise "
            "the lot size or train fewer epochs to run this plan."
        )
    if plan.order_at_edge:
        warnings.append(
            f"The best RDP order (α = {plan.best_order:g}) is at the edge of the orders searched: the RDP value may "
            "be loose. It is still a valid upper bound, and PLD does not depend on orders."
        )
    return warnings


def plan_epsilon_frame(plan: PrivacyPlan, accounts: Panel) -> pd.DataFrame:
    """One row per accountant and step count: accountant, steps, epochs, ε."""
    frames = [
        pd.DataFrame(
            {
                "accountant": name,
                "steps": curve.steps,
                "epochs": curve.steps * plan.sampling_rate,
                "epsilon": _unbounded_as_inf(curve.epsilons),
            }
        )
        for name, curve in accounts.curves.items()
    ]
    return pd.concat(frames, ignore_index=True)


def _unbounded_as_inf(epsilons: np.ndarray) -> np.ndarray:
    """∞ for the bounds that overflowed to the largest float (a composition theorem with no finite answer)."""
    return np.where(np.asarray(epsilons) >= UNBOUNDED_EPSILON, np.inf, epsilons)


def plan_accountant_table(accounts: Panel) -> pd.DataFrame:
    """Every applicable accountant's ε for the whole run, tightest first."""
    tightest, _ = accounts.tightest()
    return pd.DataFrame(
        [
            {
                "accountant": ACCOUNTANTS[name].title,
                "ε": float(_unbounded_as_inf(eps)),
                "reported": "✓ tightest" if name == tightest else "",
                "reference": ACCOUNTANTS[name].citation,
            }
            for name, eps in sorted(accounts.final().items(), key=lambda item: item[1])
        ]
    )


def plan_not_applicable(accounts: Panel) -> list[str]:
    """The accountants with no valid answer for this mechanism, each with the reason."""
    return [f"{ACCOUNTANTS[name].title}: {reason}" for name, reason in accounts.not_applicable.items()]


# ---------------------------------------------------------------- sweeps (Sweep page) and deleting (Compare page)


@dataclass(frozen=True)
class SweepPreview:
    """What a grid spec would queue before anything is queued, or the error (naming the field) that stops it."""

    error: str | None = None
    runs: int = 0
    cached: int = 0  # answered by an identical finished run: nothing trains again
    active: int = 0  # an identical run is already queued or running: the sweep shares it


def preview_sweep(raw_grid: dict) -> SweepPreview:
    """Validate every grid point as `submit_sweep` does and count those the store already answers (reads only)."""
    try:
        points = expand_sweep(raw_grid)
        keys: dict[str, str] = {}
        for point in points:
            label = ", ".join(f"{k}={json.dumps(v)}" for k, v in point.values.items())
            try:
                key = parse_spec(point.spec).cache_key(ENGINE_VERSION)
            except SpecError as exc:
                raise SweepError(f"grid point {label}", str(exc)) from None
            if key in keys:
                raise SweepError("grid", f"points {keys[key]} and {label} train the same run")
            keys[key] = label
    except SpecError as exc:
        return SweepPreview(error=str(exc))
    store = get_store()
    answers = [answer_from_store(store, key) for key in keys]
    cached = sum(a is not None and a.cached for a in answers)
    active = sum(a is not None and not a.cached for a in answers)
    return SweepPreview(runs=len(points), cached=cached, active=active)


def launch_sweep(raw_grid: dict) -> SweepSubmission:
    return submit_sweep(get_store(), raw_grid)


def list_sweeps() -> list[SweepRecord]:
    return get_store().list_sweeps()


def get_sweep(sweep_id: str) -> SweepRecord | None:
    try:
        return get_store().get_sweep(sweep_id)
    except StoreError:
        return None


def sweep_runs(sweep_id: str) -> list[RunRecord]:
    """A sweep's runs in grid order."""
    return get_store().list_runs(sweep_id=sweep_id, limit=MAX_RUNS)


def why_not_deletable(run_ids: list[str]) -> str | None:
    """Why these runs cannot be deleted (unknown, or queued or running), or None when they can."""
    try:
        check_deletable(get_store(), run_ids)
    except StoreError as exc:
        return str(exc)
    return None


def delete_stored_runs(run_ids: list[str]) -> int:
    """Delete terminal runs with their metrics and history (`StoreError`, nothing deleted, if any is active)."""
    return delete_runs(get_store(), run_ids)


# ---------------------------------------------------------------- the Data page: datasets and CSV uploads


def dataset_catalog() -> pd.DataFrame:
    """Every registered dataset, then every saved upload: sizes, and whether its files are here."""
    rows = data_catalog.catalog_rows(default_data_dirs(), data_upload.list_uploads(data_home()))
    return pd.DataFrame(rows)


def storage_bytes() -> dict[str, int]:
    """Bytes on disk of the run store, the downloaded datasets folder and the saved uploads."""
    return {
        "store": store_bytes(get_store()),
        "datasets": folder_bytes(datasets_dir()),
        "uploads": folder_bytes(data_upload.uploads_dir(data_home())),
    }


@dataclass(frozen=True)
class TrainingDataset:
    """A dataset the Train form offers: a registered one, or a CSV upload with its declared schema."""

    label: str
    info: DatasetInfo
    schema: dict | None = None


@st.cache_resource(show_spinner=False, max_entries=64)  # a resource: the facts hold their loader (not picklable)
def _upload_info(dataset: str, schema_json: str, modified: float) -> DatasetInfo:
    return dataset_info(dataset, json.loads(schema_json))  # reads the header and counts rows: cached per file version


def training_datasets() -> dict[str, TrainingDataset]:
    """Registered datasets, then saved CSV uploads (newest first) whose file still reads with its schema."""
    found = {name: TrainingDataset(label=info.title, info=info) for name, info in DATASETS.items()}
    for label, dataset, schema in uploaded_datasets():
        try:
            modified = Path(dataset.removeprefix("csv:")).stat().st_mtime
            info = _upload_info(dataset, json.dumps(schema, sort_keys=True), modified)
        except (OSError, DatasetError, ValueError):
            continue  # a file removed or changed since it was saved: the Data page says so
        found[dataset] = TrainingDataset(label=label, info=info, schema=schema)
    return found


def uploaded_datasets() -> list[tuple[str, str, dict]]:
    """Saved CSV uploads, newest first, as (label, dataset string "csv:PATH", schema): a spec trains on
    one with {"dataset": dataset string, "schema": schema, ...}."""
    return data_upload.labelled(data_upload.list_uploads(data_home()))


@st.cache_data(show_spinner="Reading the file…", max_entries=4)
def inspect_csv_upload(file_name: str, data: bytes) -> data_upload.Inspection:
    """The upload's header, first rows and row count, or the error that makes it unusable."""
    return data_upload.inspect_upload(file_name, data)


@st.cache_data(show_spinner="Suggesting a schema…", max_entries=16)
def suggest_csv_schema(file_name: str, data: bytes, target: str) -> data_upload.Suggestion:
    """The engine's suggested schema with `target` as the label, or why that column cannot be one."""
    return data_upload.suggest_schema(file_name, data, target)


def save_csv_upload(file_name: str, data: bytes, raw_schema: dict, label: str) -> data_upload.SavedUpload:
    """Check every cell against the schema, then keep the file and its schema under the data home.
    Raises UploadError or CsvSchemaError (a ValueError naming the field), and then nothing was saved."""
    return data_upload.save_upload(data_home(), file_name=file_name, data=data, raw_schema=raw_schema, label=label)


# ---------------------------------------------------------------- the Runs page: counts, queue, history, transfer


def run_counts() -> dict[str, int]:
    """How many runs the store holds in each status, zeros included."""
    counts = size_report(get_store(), largest=0).runs_by_status
    return {status.value: counts.get(status.value, 0) for status in RunStatus}


def runs_with_status(statuses: list[RunStatus], limit: int = 200) -> list[RunRecord]:
    """The newest runs in one of `statuses`."""
    return get_store().list_runs(limit=limit, statuses=statuses)


def queue_order() -> list[RunRecord]:
    """Running runs, then queued runs in the order workers claim them (oldest first)."""
    store = get_store()
    running = store.list_runs(limit=100_000, statuses=[RunStatus.RUNNING])
    queued = store.list_runs(limit=100_000, statuses=[RunStatus.QUEUED])
    return [*reversed(running), *reversed(queued)]


def run_history(run_id: str) -> list[RunEvent]:
    """A run's status changes, oldest first."""
    return get_store().events(run_id)


def cancel_runs(run_ids: list[str]) -> list[RunStatus]:
    """Cancel each run: a queued one at once (CANCELLED), a running one at its next step (RUNNING, flagged);
    a run that already ended keeps its status. Returns each run's status after the request (StoreError for
    an unknown id)."""
    store = get_store()
    return [store.request_cancel(run_id) for run_id in run_ids]


def export_runs(run_ids: list[str], include_metrics: bool = True, include_private_diagnostics: bool = False) -> Export:
    """A zip archive of the finished, failed and cancelled runs among `run_ids` (ArchiveError, StoreError): their
    released values only, unless the user opted in to the diagnostics computed on private training data."""
    return prepare_export(
        get_store(), run_ids, include_metrics=include_metrics, include_private_diagnostics=include_private_diagnostics
    )


@dataclass(frozen=True)
class ArchivePreview:
    """What an uploaded run archive holds, or why it cannot be imported."""

    error: str | None = None
    run_ids: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    sweeps: int = 0
    engine_version: str = ""
    created_at: float = 0.0
    includes_metrics: bool = False
    private_diagnostics: bool = False  # the archive holds values computed on private training data


@st.cache_data(show_spinner="Reading the archive…", max_entries=2)
def preview_run_archive(data: bytes) -> ArchivePreview:
    """The archive read and validated in full (every run as an import checks it), without touching the store."""
    try:
        summary = summarize_archive(data)
    except ArchiveError as exc:
        return ArchivePreview(error=str(exc))
    return ArchivePreview(
        run_ids=summary.run_ids,
        statuses=summary.statuses,
        sweeps=summary.sweeps,
        engine_version=summary.engine_version,
        created_at=summary.created_at,
        includes_metrics=summary.includes_metrics,
        private_diagnostics=summary.private_diagnostics,
    )


def import_run_archive(data: bytes, *, serve_from_cache: bool = False) -> ImportReport:
    """Import every run of an archive in one transaction (ArchiveError, StoreError: the store is unchanged).
    `serve_from_cache`: the user's choice to let the archive's finished runs answer identical submissions here
    (cache hits, marked imported); by default they are kept as records only."""
    return import_runs(get_store(), data, serve_from_cache=serve_from_cache)


# ---------------------------------------------------------------- the Train page: dataset files and baselines


def data_directories() -> list[str]:
    """Where datasets are looked for, in order (`DPLAB_DATA_DIR`, then the data home's download folder)."""
    return [str(d) for d in default_data_dirs()]


def missing_dataset_files(name: str) -> list[str]:
    """The files of a registered dataset found in no data directory (relative paths); [] when it is built in
    or all its files are here (looked up only: training verifies each file's SHA-256)."""
    dirs = default_data_dirs()
    return [f.relpath for f in data_catalog.dataset_files(name) if not any((d / f.relpath).is_file() for d in dirs)]


@dataclass(frozen=True)
class Baseline:
    """A non-private reference accuracy for a private run's chart."""

    label: str
    test_accuracy: float


BASELINE_SEARCH = 200  # newest finished runs looked through (one indexed query per poll of a live run)


def nonprivate_baseline(spec: dict) -> Baseline | None:
    """The newest finished non-private run on the same dataset, model (and hidden widths) and features, among
    the newest `BASELINE_SEARCH` finished runs. Not cached: a baseline that finishes shows up at once."""
    wanted = (spec.get("dataset"), spec.get("model"), spec.get("hidden"), spec.get("features", "pixels"))
    for run in get_store().list_runs(limit=BASELINE_SEARCH, statuses=[RunStatus.FINISHED]):
        other = run.spec
        found = (other.get("dataset"), other.get("model"), other.get("hidden"), other.get("features", "pixels"))
        accuracy = (run.result or {}).get("test_accuracy")
        if other.get("algorithm") == "nonprivate" and found == wanted and _positive_number(accuracy):
            return Baseline(label=f"non-private run {run.id}", test_accuracy=float(accuracy))
    return None


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

"""Export and import of runs: a zip archive of specs and results (JSON), metrics (CSV) and sweeps
(`cache.archive.format` describes the format). Bytes in and out, so the dashboard can offer a download and
take an upload; paths too, for the command line.

Only terminal runs (finished, failed, cancelled) are exported; queued and running runs are left out
and listed as such. An export carries the runs' released values only (`engine.jobs.disclosure`): the
per-step diagnostics computed on private training data (lot loss and accuracy, lot size, clip fraction,
gradient-norm quantiles, ...), which no ε covers, travel only when the user opts in
(`include_private_diagnostics`), and the archive's manifest says which it is. So do a run's timings, which
follow its realized lot sizes: by default its result has no `seconds` and its timestamps (created,
started, finished, each status event; a sweep's creation) are floored to the UTC day.

An import is all or nothing: the archive is validated completely before the store is touched, and its
runs land in one transaction. It streams (`cache.archive.reader`), so its memory does not grow with
the archive. A run id already in the store is skipped, never overwritten, so importing the same archive
twice changes nothing the second time. Archives of either kind import, and so do those written before
the opt-in existed (their manifest says nothing of it: read as holding diagnostics if they hold metrics).
An archive whose runs hold a private result field or a time finer than its day (one written before timings
were coarsened) is reported as holding private diagnostics, whatever its manifest says.

An export is saved to a new file, or with `force` over a plain file that is no part of a store; never over a
store, its companions, a database, a file of the data home, a directory, a device or a link
(`cache.archive.destination`, which every caller's save goes through).

Every imported run is checked against the shape the pages read (`engine.jobs.run_schema`), whatever
engine made it, then for fields that contradict one another (`cache.archive.consistency`: times out of
order or outside 2000 to tomorrow, attempts unlike its history, progress beyond its steps); its metric
names must be the lab's (`cache.archive.csv_cells.METRIC_NAME`).

An archive's cache keys are not trusted, nor are its results: an imported run never answers a submission
here unless the user asks for it at import (`serve_from_cache`). A run made by this engine version has its
spec validated again (`parse_spec`) and its key recomputed: with `serve_from_cache` an imported finished run
then answers an identical submission (marked imported); without it, the key is kept as `imported:<key>`,
which no submission computes. A spec that no longer validates rejects the import, naming the run and the
field. A run made by another engine version keeps its spec as it is, under a key that can never equal a
current one (`<engine version>:<key>`), so it is kept and shown but never served as this engine's result.
Nor is a run on an uploaded `csv:PATH` dataset: validating its spec would read (and hash) a local file the
archive names, which an import never does; it is kept under an `unverified:` key. Imported results are shown
as the archive states them, marked imported everywhere.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cache import RunStatus, Store
from cache.archive.consistency import check_consistent
from cache.archive.destination import save_archive
from cache.archive.format import Archive, ArchivedRun, ArchiveError
from cache.archive.reader import ArchiveReader, Source
from cache.archive.writer import write_archive
from cache.store.archive_io import archive_runs, insert_runs
from engine import ENGINE_VERSION
from engine.jobs.disclosure import (
    DIAGNOSTICS_NOTE,
    WITHHELD_ERROR,
    day_of,
    exact_time,
    public_result,
    quotes_uploaded_values,
)
from engine.jobs.run_schema import RunShapeError, check_shown_fields
from engine.metric_names import is_released_metric
from engine.privacy.accountants.curve import epsilons_as_inf, is_epsilon_name, unbounded_as_inf
from engine.training import SpecError, parse_spec
from engine.training.datasets import CSV_PREFIX

UNVERIFIED = "unverified:"  # the key prefix of imported runs whose data cannot be checked here
IMPORTED = "imported:"  # the key prefix of imported runs the user did not choose to serve from the cache
NOT_TRUSTED = "imported without serve-from-cache: its results were computed elsewhere"


@dataclass(frozen=True, kw_only=True)
class Export:
    """An archive ready to save or download, and what went into it."""

    data: bytes
    run_ids: tuple[str, ...]
    sweep_ids: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (run id, why): queued and running runs
    include_metrics: bool
    private_diagnostics: bool  # the user opted in to the diagnostics computed on private training data
    store_path: Path | None = None  # the store it was read from: never written over

    def save(self, path: Path | str, *, force: bool = False) -> Path:
        """Write the archive to `path`, a new file (with `force`, an existing regular file may be replaced),
        atomically: a partial file never takes its place. Never over a store or a file of one, a database, a
        file of the data home that is not an archive, a directory, a device or a link
        (`cache.archive.destination`: `ExportTargetError` says which and what to do)."""
        stores = () if self.store_path is None else (self.store_path,)
        return save_archive(self.data, path, force=force, stores=stores)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.run_ids),
            "sweeps": list(self.sweep_ids),
            "bytes": len(self.data),
            "include_metrics": self.include_metrics,
            "private_diagnostics": self.private_diagnostics,
            "left_out": [{"id": i, "reason": why} for i, why in self.left_out],
        }


@dataclass(frozen=True, kw_only=True)
class ArchiveSummary:
    """What an archive holds (`summarize_archive`): its runs' ids and statuses, sweeps, and the exporter."""

    run_ids: tuple[str, ...]
    statuses: tuple[str, ...]
    sweeps: int
    engine_version: str
    created_at: float
    includes_metrics: bool
    private_diagnostics: bool  # the manifest's word (before the opt-in: whether it has metrics), or exact timings


@dataclass(frozen=True, kw_only=True)
class ImportReport:
    """What an import did. `cache_hits`: imported finished runs now served for identical submissions;
    `not_cached`: imported runs that never will be (another engine version, or unverifiable data)."""

    imported: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (run id, why)
    cache_hits: tuple[str, ...]
    not_cached: tuple[tuple[str, str], ...]  # (run id, why)
    metric_rows: int
    sweeps_added: tuple[str, ...]
    sweep_members_added: int
    archive_engine_version: str  # the exporter's
    archive_created_at: float
    archive_private_diagnostics: bool = False  # the archive holds values computed on private training data

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": list(self.imported),
            "skipped": [{"id": i, "reason": why} for i, why in self.skipped],
            "cache_hits": list(self.cache_hits),
            "not_cached": [{"id": i, "reason": why} for i, why in self.not_cached],
            "metric_rows": self.metric_rows,
            "sweeps_added": list(self.sweeps_added),
            "sweep_members_added": self.sweep_members_added,
            "archive": {
                "engine_version": self.archive_engine_version,
                "created_at": self.archive_created_at,
                "private_diagnostics": self.archive_private_diagnostics,
            },
        }


def prepare_export(
    store: Store,
    run_ids: Iterable[str] = (),
    *,
    sweep_id: str | None = None,
    all_runs: bool = False,
    include_metrics: bool = True,
    include_private_diagnostics: bool = False,
) -> Export:
    """The archive of `run_ids` and the runs of `sweep_id` (with the sweep), or of every run and
    sweep with `all_runs`. An unknown id raises `StoreError`; so does a selection with no terminal run.

    `include_metrics`: the per-step metric rows (released values only). `include_private_diagnostics`: the
    user's explicit choice to add what was computed on the private training data and is not released
    (per-step diagnostics, and any such result field); the manifest records the choice."""
    ids = list(run_ids)
    if not all_runs and not ids and sweep_id is None:
        raise ArchiveError("nothing selected: give run ids, a sweep id, or all runs")
    sweeps = [sweep_id] if sweep_id is not None else []
    archive, left_out = archive_runs(
        store, None if all_runs else ids, sweeps, engine_version=ENGINE_VERSION, include_metrics=include_metrics
    )
    if not archive.runs:
        active = ", ".join(run_id for run_id, _ in left_out)
        raise ArchiveError(
            "no finished, failed or cancelled run to export" + (f" ({active}: still active)" * bool(active))
        )
    archive = unbounded_as_infinity(archive)
    if not include_private_diagnostics:
        archive = released_only(archive)
    archive = replace(
        archive,
        private_diagnostics=include_private_diagnostics,
        privacy_note=DIAGNOSTICS_NOTE[include_private_diagnostics],
    )
    return Export(
        data=write_archive(archive),
        run_ids=tuple(r.id for r in archive.runs),
        sweep_ids=tuple(s.id for s in archive.sweeps),
        left_out=tuple(left_out),
        include_metrics=include_metrics,
        private_diagnostics=include_private_diagnostics,
        store_path=Path(store.path),
    )


def unbounded_as_infinity(archive: Archive) -> Archive:
    """The archive with every unbounded ε written ∞ (JSON `Infinity`, CSV `inf`): a run recorded before the
    composition curves kept ∞ holds the largest float (1.8e308) in its place, in its result and metrics."""
    metrics = {
        run_id: [
            (step, name, unbounded_as_inf(value) if is_epsilon_name(name) else value) for step, name, value in rows
        ]
        for run_id, rows in archive.metrics.items()
    }
    runs = tuple(replace(run, result=epsilons_as_inf(run.result)) for run in archive.runs)
    return replace(archive, runs=runs, metrics=metrics)


def released_only(archive: Archive) -> Archive:
    """The archive less what was computed on private training data: only released metric rows, results
    without private-diagnostic fields (`seconds` among them), and timestamps floored to the UTC day."""
    metrics = {run_id: [row for row in rows if is_released_metric(row[1])] for run_id, rows in archive.metrics.items()}
    runs = tuple(
        day_timings(without_uploaded_values(replace(run, result=public_result(run.result)))) for run in archive.runs
    )
    sweeps = tuple(replace(sweep, created_at=day_of(sweep.created_at)) for sweep in archive.sweeps)
    return replace(archive, runs=runs, metrics=metrics, sweeps=sweeps)


def day_timings(run: ArchivedRun) -> ArchivedRun:
    """The run with every timestamp floored to its UTC day: their order is kept (so created ≤ started ≤ finished
    still holds), the run's duration is not (it follows the realized lot sizes)."""
    return replace(
        run,
        created_at=day_of(run.created_at),
        started_at=None if run.started_at is None else day_of(run.started_at),
        finished_at=None if run.finished_at is None else day_of(run.finished_at),
        events=tuple(replace(e, at=day_of(e.at)) for e in run.events),
    )


def holds_private_values(run: ArchivedRun) -> bool:
    """Whether an archived run holds what a default export leaves out and can be seen in it: a private result
    field (`seconds`, ...) or a time finer than its UTC day (an archive from before timings were coarsened)."""
    times = (run.created_at, run.started_at, run.finished_at, *(e.at for e in run.events))
    return any(exact_time(t) for t in times) or public_result(run.result) != run.result


def without_uploaded_values(run: ArchivedRun) -> ArchivedRun:
    """A run on an uploaded CSV with its error texts withheld (they may quote a cell of the private file)."""
    if not quotes_uploaded_values(run.spec):
        return run
    events = tuple(
        replace(e, detail=WITHHELD_ERROR) if e.detail and e.status is RunStatus.FAILED else e for e in run.events
    )
    return replace(run, error=WITHHELD_ERROR if run.error else None, events=events)


def export_runs(
    store: Store,
    run_ids: Iterable[str] = (),
    *,
    sweep_id: str | None = None,
    all_runs: bool = False,
    include_metrics: bool = True,
    include_private_diagnostics: bool = False,
) -> bytes:
    """The zip bytes of `prepare_export` (a download for the dashboard)."""
    return prepare_export(
        store,
        run_ids,
        sweep_id=sweep_id,
        all_runs=all_runs,
        include_metrics=include_metrics,
        include_private_diagnostics=include_private_diagnostics,
    ).data


def import_runs(store: Store, data: Source, *, serve_from_cache: bool = False) -> ImportReport:
    """Import an archive (bytes, a path, or an uploaded file object), streaming it in bounded memory. A
    malformed archive raises `ArchiveError` naming the member, run and field, and leaves the store
    exactly as it was: a first pass checks everything without touching the store, the second inserts in
    one transaction and checks again as it reads (a file changed in between rolls it back).

    `serve_from_cache`: the user's explicit choice to let the archive's finished runs of this engine
    version answer identical submissions here (cache hits, marked imported). Off by default: results
    computed elsewhere never pass for local training unless the user trusts their source."""
    exact = False  # whether a run holds exact timings or a private result field, whatever the manifest says
    with ArchiveReader(data) as reader:
        for run in reader.runs():
            rekey(run, serve_from_cache=serve_from_cache)
            exact = exact or holds_private_values(run)
            for _ in reader.metric_rows(run.id):
                pass
        for _ in reader.sweeps():
            pass
    cache_hits, not_cached = [], []

    def keyed_runs(reader: ArchiveReader) -> Iterator[ArchivedRun]:
        for run in reader.runs():
            keyed, why = rekey(run, serve_from_cache=serve_from_cache)
            if why is not None:
                not_cached.append((run.id, why))
            elif run.status is RunStatus.FINISHED:
                cache_hits.append(run.id)
            yield keyed

    with ArchiveReader(data) as reader:
        done = insert_runs(store, keyed_runs(reader), reader.metric_rows, reader.sweeps())
        version, created = reader.engine_version, reader.manifest["created_at"]
        private = reader.manifest["private_diagnostics"] or exact
    kept = set(done.imported)
    return ImportReport(
        imported=done.imported,
        skipped=done.skipped,
        cache_hits=tuple(i for i in cache_hits if i in kept),
        not_cached=tuple((i, why) for i, why in not_cached if i in kept),
        metric_rows=done.metric_rows,
        sweeps_added=done.sweeps_added,
        sweep_members_added=done.sweep_members_added,
        archive_engine_version=version,
        archive_created_at=created,
        archive_private_diagnostics=private,
    )


def rekey(run: ArchivedRun, *, serve_from_cache: bool = False) -> tuple[ArchivedRun, str | None]:
    """The run with the cache key this store gives it, and why it is not a cache key of this engine
    (None when it is). Raises `ArchiveError` for a record a page could not show, or a spec of this engine
    version that does not validate, or whose fields contradict one another (`cache.archive.consistency`)."""
    where = f"runs.json: run {run.id}"
    try:
        check_shown_fields(status=run.status, spec=run.spec, plan=run.plan, result=run.result)
    except RunShapeError as exc:
        raise ArchiveError(f"{where}: {exc}") from None
    check_consistent(run, where)  # its fields agree with one another (times, attempts, steps)
    if run.engine_version != ENGINE_VERSION:
        prefix = f"{run.engine_version}:"
        key = run.cache_key if run.cache_key.startswith(prefix) else prefix + run.cache_key
        return replace(run, cache_key=key), f"made by engine version {run.engine_version}, this is {ENGINE_VERSION}"
    if run.spec["dataset"].startswith(CSV_PREFIX):
        key = run.cache_key if run.cache_key.startswith(UNVERIFIED) else UNVERIFIED + run.cache_key
        return replace(run, cache_key=key), "trained on an uploaded CSV file, which an import never reads"
    try:
        spec = parse_spec(run.spec)
    except SpecError as exc:
        raise ArchiveError(
            f"{where}: spec field {exc.field!r:.80} does not validate on engine {ENGINE_VERSION}: {exc}"
        ) from None
    key = spec.cache_key(ENGINE_VERSION)
    if not serve_from_cache:
        return replace(run, spec=spec.to_dict(), cache_key=IMPORTED + key), NOT_TRUSTED
    return replace(run, spec=spec.to_dict(), cache_key=key), None


def summarize_archive(data: Source) -> ArchiveSummary:
    """What an archive holds, read and checked in full (every run as an import checks it) without
    touching a store and without keeping its rows: a preview before an import."""
    statuses: list[str] = []
    exact = False
    with ArchiveReader(data) as reader:
        for run in reader.runs():
            rekey(run)
            statuses.append(run.status.value)
            exact = exact or holds_private_values(run)
            for _ in reader.metric_rows(run.id):
                pass
        sweeps = sum(1 for _ in reader.sweeps())
        manifest = reader.manifest
        ids = tuple(sorted(reader.run_ids))
    return ArchiveSummary(
        run_ids=ids,
        statuses=tuple(statuses),
        sweeps=sweeps,
        engine_version=manifest["engine_version"],
        created_at=manifest["created_at"],
        includes_metrics=manifest["includes_metrics"],
        private_diagnostics=manifest["private_diagnostics"] or exact,
    )

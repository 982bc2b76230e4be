"""Export and import of runs: a zip archive of specs and results (JSON), metrics (CSV) and sweeps
(`cache.archive` describes the format). Bytes in and out, so the dashboard can offer a download and
take an upload; paths too, for the command line.

Only terminal runs (finished, failed, cancelled) are exported; queued and running runs are left out
and listed as such. An import is all or nothing: the archive is validated completely before the
store is touched, and its runs land in one transaction. A run id already in the store is skipped,
never overwritten, so importing the same archive twice changes nothing the second time.

An archive's cache keys are not trusted. A run made by this engine version has its spec validated
again (`parse_spec`) and its key recomputed, so an imported finished run answers an identical
submission from the cache; a spec that no longer validates rejects the import, naming the run and
the field. A run made by another engine version keeps its spec as it is, under a key that can never
equal a current one (`<engine version>:<key>`: not a hex digest), so it is kept and shown but never
served as this engine's result. Nor is a run on an uploaded `csv:PATH` dataset: validating its spec
would read (and hash) a local file the archive names, which an import never does; it is kept under
an `unverified:` key.
Imported results themselves are taken as the archive states them (the `imported` flag marks them).
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO

from cache import RunStatus, Store
from cache.archive import Archive, ArchivedRun, ArchiveError, read_archive, write_archive
from cache.maintenance import archive_runs, insert_runs
from engine import ENGINE_VERSION
from engine.training import SpecError, parse_spec
from engine.training.spec import CSV_PREFIX

UNVERIFIED = "unverified:"  # the key prefix of imported runs whose data cannot be checked here


@dataclass(frozen=True, kw_only=True)
class Export:
    """An archive ready to save or download, and what went into it."""

    data: bytes
    run_ids: tuple[str, ...]
    sweep_ids: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (run id, why): queued and running runs
    include_metrics: bool

    def save(self, path: Path | str) -> Path:
        """Write the archive to `path` (atomically: a partial file never takes its place)."""
        target = Path(path)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.partial")
        temporary.write_bytes(self.data)
        temporary.replace(target)
        return target

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.run_ids),
            "sweeps": list(self.sweep_ids),
            "bytes": len(self.data),
            "include_metrics": self.include_metrics,
            "left_out": [{"id": i, "reason": why} for i, why in self.left_out],
        }


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": list(self.imported),
            "skipped": [{"id": i, "reason": why} for i, why in self.skipped],
            "cache_hits": list(self.cache_hits),
            "not_cached": [{"id": i, "reason": why} for i, why in self.not_cached],
            "metric_rows": self.metric_rows,
            "sweeps_added": list(self.sweeps_added),
            "sweep_members_added": self.sweep_members_added,
            "archive": {"engine_version": self.archive_engine_version, "created_at": self.archive_created_at},
        }


def prepare_export(
    store: Store,
    run_ids: Iterable[str] = (),
    *,
    sweep_id: str | None = None,
    all_runs: bool = False,
    include_metrics: bool = True,
) -> Export:
    """The archive of `run_ids` and the runs of `sweep_id` (with the sweep), or of every run and
    sweep with `all_runs`. An unknown id raises `StoreError`; so does a selection with no terminal run."""
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
    return Export(
        data=write_archive(archive),
        run_ids=tuple(r.id for r in archive.runs),
        sweep_ids=tuple(s.id for s in archive.sweeps),
        left_out=tuple(left_out),
        include_metrics=include_metrics,
    )


def export_runs(
    store: Store,
    run_ids: Iterable[str] = (),
    *,
    sweep_id: str | None = None,
    all_runs: bool = False,
    include_metrics: bool = True,
) -> bytes:
    """The zip bytes of `prepare_export` (a download for the dashboard)."""
    return prepare_export(store, run_ids, sweep_id=sweep_id, all_runs=all_runs, include_metrics=include_metrics).data


def import_runs(store: Store, data: bytes | str | PathLike | BinaryIO) -> ImportReport:
    """Import an archive (bytes, a path, or an uploaded file object). A malformed archive raises
    `ArchiveError` naming the member, run and field, and leaves the store exactly as it was."""
    archive = read_archive(data)
    runs, cache_hits, not_cached = [], [], []
    for run in archive.runs:
        keyed, why = rekey(run)
        runs.append(keyed)
        if why is not None:
            not_cached.append((run.id, why))
        elif run.status is RunStatus.FINISHED:
            cache_hits.append(run.id)
    done = insert_runs(store, runs, archive.metrics, archive.sweeps)
    kept = set(done.imported)
    return ImportReport(
        imported=done.imported,
        skipped=done.skipped,
        cache_hits=tuple(i for i in cache_hits if i in kept),
        not_cached=tuple((i, why) for i, why in not_cached if i in kept),
        metric_rows=done.metric_rows,
        sweeps_added=done.sweeps_added,
        sweep_members_added=done.sweep_members_added,
        archive_engine_version=archive.engine_version,
        archive_created_at=archive.created_at,
    )


def rekey(run: ArchivedRun) -> tuple[ArchivedRun, str | None]:
    """The run with the cache key this store gives it, and why it is not a cache key of this engine
    (None when it is). Raises `ArchiveError` for a spec of this engine version that does not validate."""
    if run.engine_version != ENGINE_VERSION:
        prefix = f"{run.engine_version}:"
        key = run.cache_key if run.cache_key.startswith(prefix) else prefix + run.cache_key
        return replace(run, cache_key=key), f"made by engine version {run.engine_version}, this is {ENGINE_VERSION}"
    dataset = run.spec.get("dataset")
    if isinstance(dataset, str) and dataset.startswith(CSV_PREFIX):
        key = run.cache_key if run.cache_key.startswith(UNVERIFIED) else UNVERIFIED + run.cache_key
        return replace(run, cache_key=key), "trained on an uploaded CSV file, which an import never reads"
    try:
        spec = parse_spec(run.spec)
    except SpecError as exc:
        raise ArchiveError(
            f"runs.json: run {run.id}: spec field {exc.field!r} does not validate on engine {ENGINE_VERSION}: {exc}"
        ) from None
    return replace(run, spec=spec.to_dict(), cache_key=spec.cache_key(ENGINE_VERSION)), None


def preview_archive(data: bytes | str | PathLike | BinaryIO) -> Archive:
    """The decoded archive without importing it (a preview: how many runs, from which engine)."""
    return read_archive(data)

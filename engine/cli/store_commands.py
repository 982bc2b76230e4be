"""export, import, delete, gc, size: moving runs between stores and keeping a store small.

Every command takes `--json` (one JSON object on stdout). `delete` asks before deleting on a
terminal and refuses without `--yes` elsewhere; `gc` only lists what it would delete unless given
`--yes`, then deletes and compacts. Neither touches queued or running runs: cancel them first.
`export` writes released values only unless given `--include-private-diagnostics`, to a new file unless given
`--force` (`cache.archive.destination` says what it never writes over).
"""

import argparse
import sys

from cache import RunStatus, Store, datasets_dir
from cache.archive.format import ArchiveError
from cache.archive.limits import shown_path
from cache.store.maintenance import SizeReport, check_deletable, compact, delete_runs, select_for_gc, size_report
from cache.store.records import TERMINAL
from engine import ENGINE_VERSION
from engine.cli.common import CliError, emit
from engine.jobs.disclosure import DIAGNOSTICS_NOTE
from engine.jobs.transfer import import_runs, prepare_export

DAY_S = 86_400.0
GC_NOTE = "runs of lost workers are failed by the workers themselves (reaping is not gc's job)"


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def cmd_export(args: argparse.Namespace, store: Store) -> None:
    if not (args.runs or args.sweep or args.all):
        raise CliError("export: give run ids, --sweep ID or --all")
    if args.all and (args.runs or args.sweep):
        raise CliError("export: --all exports every run; give it alone, without run ids or --sweep")
    try:
        export = prepare_export(
            store,
            args.runs,
            sweep_id=args.sweep,
            all_runs=args.all,
            include_metrics=not args.no_metrics,
            include_private_diagnostics=args.include_private_diagnostics,
        )
        path = export.save(args.output, force=args.force)
    except ArchiveError as exc:
        raise CliError(f"export: {exc}") from None
    except OSError as exc:
        raise CliError(f"{args.output}: cannot write ({exc.strerror or exc})") from None
    if args.json:
        emit({"path": str(path), **export.to_dict()})
        return
    sweeps = f" and {len(export.sweep_ids)} sweep(s)" if export.sweep_ids else ""
    print(f"exported {len(export.run_ids)} run(s){sweeps} to {path} ({_mib(len(export.data))})")
    print(f"{'WARNING: ' if export.private_diagnostics else ''}{DIAGNOSTICS_NOTE[export.private_diagnostics]}")
    for run_id, why in export.left_out:
        print(f"left out {run_id}: {why}")


def cmd_import(args: argparse.Namespace, store: Store) -> None:
    file = shown_path(args.file)
    try:
        report = import_runs(store, args.file, serve_from_cache=args.serve_from_cache)
    except ArchiveError as exc:
        message = str(exc).removeprefix(f"{file}: ")
        raise CliError(f"{file}: {message}; nothing was imported") from None
    if args.json:
        emit(report.to_dict())
        return
    print(
        f"imported {len(report.imported)} run(s) ({report.metric_rows} metric rows) from {file}, exported by "
        f"engine {report.archive_engine_version}"
    )
    if report.cache_hits:
        print(
            f"{len(report.cache_hits)} finished run(s) now answer identical submissions from the cache "
            "(--serve-from-cache; marked imported)"
        )
    reasons: dict[str, list[str]] = {}
    for run_id, why in report.not_cached:
        reasons.setdefault(why, []).append(run_id)
    for why, run_ids in reasons.items():
        shown = ", ".join(run_ids[:5]) + (f" and {len(run_ids) - 5} more" if len(run_ids) > 5 else "")
        print(f"{len(run_ids)} run(s) kept as records, never cache hits ({why}): {shown}")
    for run_id, why in report.skipped:
        print(f"skipped {run_id}: {why}")
    if report.sweeps_added:
        print(f"sweeps added: {', '.join(report.sweeps_added)}")


def confirm(question: str) -> bool:
    """Ask on the terminal (stderr, so --json output stays clean)."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_delete(args: argparse.Namespace, store: Store) -> None:
    ids = check_deletable(store, args.runs)  # unknown or active: an error before anything is asked
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(f"refusing to delete {len(ids)} run(s) without confirmation: pass --yes")
        if not confirm(f"Delete {len(ids)} run(s) ({', '.join(ids[:5])}{', …' * (len(ids) > 5)})?"):
            if args.json:
                emit({"deleted": 0, "runs": [], "confirmed": False})
            else:
                print("nothing deleted")
            return
    deleted = delete_runs(store, ids)
    if args.json:
        emit({"deleted": deleted, "runs": ids, "confirmed": True})
    else:
        print(f"deleted {deleted} run(s) with their metrics and history: {', '.join(ids)}")


def cmd_gc(args: argparse.Namespace, store: Store) -> None:
    if args.older_than is not None and not args.older_than >= 0:
        raise CliError(f"--older-than must be a number of days >= 0, got {args.older_than}")
    ids = select_for_gc(
        store,
        statuses=[RunStatus(s) for s in args.status],
        older_than_s=None if args.older_than is None else args.older_than * DAY_S,
        other_engine_versions=args.other_engine_versions,
        current_engine_version=ENGINE_VERSION,
    )
    out = {"dry_run": not args.yes, "candidates": ids, "deleted": 0, "compaction": None, "note": GC_NOTE}
    if args.yes:
        out["deleted"] = delete_runs(store, ids)
        out["compaction"] = compact(store).to_dict()
    if args.json:
        emit(out)
        return
    if not args.yes:
        print(f"would delete {len(ids)} run(s){': ' + ', '.join(ids) if ids else ''}; pass --yes to delete them")
    else:
        squeeze = out["compaction"]
        print(
            f"deleted {out['deleted']} run(s); store {_mib(squeeze['bytes_before'])} → {_mib(squeeze['bytes_after'])}"
        )
    print(f"note: {GC_NOTE}")


def print_size(report: SizeReport) -> None:
    statuses = ", ".join(f"{s} {n}" for s, n in report.runs_by_status.items()) or "none"
    versions = ", ".join(f"{v}: {n}" for v, n in report.runs_by_engine_version.items()) or "none"
    print(f"store: {report.path}")
    print(
        f"files: {_mib(report.file_bytes)} (database {_mib(report.db_bytes)}, wal {_mib(report.wal_bytes)}, "
        f"shm {_mib(report.shm_bytes)}); {report.page_count} pages of {report.page_size} B, "
        f"{report.free_pages} free"
    )
    print(f"runs: {report.run_count} ({statuses}); {report.imported_runs} imported; by engine version: {versions}")
    print(f"metric rows: {report.metric_rows}; status events: {report.event_rows}; sweeps: {report.sweeps}")
    for run in report.largest_runs:
        print(f"  {run.run_id} ({run.status}): {run.metric_rows} metric rows")
    if report.datasets_bytes is not None:
        print(f"datasets: {_mib(report.datasets_bytes)}")


def cmd_size(args: argparse.Namespace, store: Store) -> None:
    report = size_report(store, datasets_dir=datasets_dir())
    if args.json:
        emit(report.to_dict())
    else:
        print_size(report)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write finished, failed and cancelled runs to a zip archive")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run ids")
    p.add_argument("--sweep", metavar="ID", help="the runs of this sweep, with the sweep")
    p.add_argument("--all", action="store_true", help="every run and sweep")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE.zip",
        help="a new file (never a store, a database, a file of the data home, a directory, a device or a link)",
    )
    p.add_argument(
        "--force", action="store_true", help="replace FILE.zip if it exists (a regular file that is not a store's)"
    )
    p.add_argument("--no-metrics", action="store_true", help="specs and results only, no per-step metrics")
    p.add_argument(
        "--include-private-diagnostics",
        action="store_true",
        help="also export what was computed on the private training data and is not released (each "
        "step's lot loss, accuracy and size, clip fraction, gradient-norm quantiles, regret, "
        "step timings, each run's duration and exact times): no epsilon covers them; the manifest records "
        "the choice. Default: released values only (epsilon by step, test-set accuracy and loss, epoch; "
        "no durations, times floored to the UTC day)",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="add the runs of an archive to the store (all or nothing)")
    p.add_argument("file", metavar="FILE.zip")
    p.add_argument(
        "--serve-from-cache",
        action="store_true",
        help="let the archive's finished runs answer identical submissions here, as cache hits marked "
        "imported (only for an archive you trust: its results were computed elsewhere)",
    )
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("delete", help="delete runs with their metrics and history (asks first)")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_delete)

    terminal = [s.value for s in TERMINAL]
    p = sub.add_parser("gc", help="list (or with --yes delete, then compact) runs not worth keeping")
    p.add_argument("--status", nargs="+", choices=terminal, default=["failed", "cancelled"])
    p.add_argument("--older-than", type=float, metavar="DAYS", help="only runs that ended more than DAYS ago")
    p.add_argument(
        "--other-engine-versions",
        action="store_true",
        help=f"also every run made by an engine version other than {ENGINE_VERSION}",
    )
    p.add_argument("--yes", action="store_true", help="delete and compact (default: only list)")
    p.set_defaults(func=cmd_gc)

    p = sub.add_parser("size", help="how big the store is and what fills it")
    p.set_defaults(func=cmd_size)

    for name in ("export", "import", "delete", "gc", "size"):
        sub.choices[name].add_argument("--json", action="store_true", help="one JSON object on stdout")
        sub.choices[name].set_defaults(needs_store=True)

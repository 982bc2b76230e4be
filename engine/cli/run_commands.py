"""train, submit, sweep, worker, runs, show, cancel: runs and the queue."""

import argparse
import logging
import os
import socket
import sys
import time

from cache import RunRecord, RunStatus, Store
from engine.cli.common import CliError, bounded, emit, read_json_file
from engine.jobs import settings
from engine.jobs.naming import generated_run_name, generated_sweep_name
from engine.jobs.options import split_job_options
from engine.jobs.recording import RunRecorder
from engine.jobs.release import RunToRelease
from engine.jobs.run_training import train_claimed
from engine.jobs.submission import answer_from_store, new_run, submit
from engine.jobs.sweep import SweepSubmission, privacy_of_sweep, submit_sweep
from engine.jobs.workers import warmup
from engine.jobs.workers.datasets import LoadedDatasets
from engine.jobs.workers.worker import Heartbeat, Worker
from engine.privacy import epsilon_text
from engine.privacy.accountants.curve import epsilons_as_inf, is_epsilon_name, unbounded_as_inf
from engine.privacy.limits import NumberRange
from engine.training import load_dataset, parse_spec, plan_spec
from engine.training.config.plan import budget_fill_text
from engine.training.config.text import text_problem

BACKENDS = ("local", "ray")


def read_spec(path: str):
    """(the validated training spec, its job options) from a spec file."""
    training, options = split_job_options(read_json_file(path, what="spec"))
    return parse_spec(training), options


def cmd_train(args: argparse.Namespace, store: Store) -> None:
    """Train in the foreground, recorded in the store like a worker's run. Whatever can refuse the spec
    (planning σ, reading the dataset) runs before the store is touched."""
    spec, options = read_spec(args.spec)
    run = new_run(spec, options)
    if not args.force and (answer := answer_from_store(store, run.cache_key)) is not None and answer.cached:
        if answer.imported and not args.quiet:
            print(
                f"served from run {answer.run_id}, imported from an archive whose results you chose to serve "
                "from the cache; --force trains it here",
                file=sys.stderr,
            )
        emit(
            {
                **epsilons_as_inf(store.get_run(answer.run_id).result),
                "cached": True,
                "imported": answer.imported,
                "run_id": answer.run_id,
            }
        )
        return
    plan = plan_spec(spec)
    if not args.quiet and (filled := budget_fill_text(plan.summary())):
        print(filled, file=sys.stderr)
    data_dirs = settings.default_data_dirs()
    dataset = load_dataset(spec.dataset, data_dirs, schema=spec.schema)
    name = f"cli@{socket.gethostname()}:{os.getpid()}"
    store.register_worker(name, backend="cli", host=socket.gethostname(), pid=os.getpid(), device=None)
    planned = {"noise_multiplier": plan.noise_multiplier} if plan.noise_multiplier is not None else None
    run_id = store.create_run(
        spec=run.spec,
        cache_key=run.cache_key,
        engine_version=run.engine_version,
        status=RunStatus.RUNNING,
        worker=name,
        plan=planned,
    )
    recorder = RunRecorder(store, store.get_run(run_id), worker=name)
    last_print = [0.0]

    def progress(record):
        if not args.quiet and (time.monotonic() - last_print[0] > 1.0 or record.step == recorder_plan.steps):
            last_print[0] = time.monotonic()
            eps = "not private" if record.epsilon is None else f"ε={epsilon_text(record.epsilon, '.3f')}"
            print(f"step {record.step}/{recorder_plan.steps}  {eps}", file=sys.stderr, flush=True)

    with Heartbeat(store, name, every_s=settings.heartbeat_s()) as heartbeat:
        heartbeat.run_ids = (run_id,)
        try:
            recorder_plan = recorder.start()
            result = train_claimed(
                run.spec,
                data_dirs=data_dirs,
                sink=recorder.write,
                plan=recorder_plan,
                dataset=dataset,
                on_step=progress,
                should_stop=lambda: run_id in heartbeat.cancelled or recorder.cancel_requested,
            )
        except BaseException as exc:
            recorder.failed(f"{type(exc).__name__}: {exc}")
            store.worker_stopped(name, reason="failed")
            raise
        recorder.finished(result)
    store.worker_stopped(name, reason="done")
    emit({**result, "cached": False, "imported": False, "run_id": run_id})


def cmd_submit(args: argparse.Namespace, store: Store) -> None:
    spec, options = read_spec(args.spec)
    submission = submit(store, spec, force=args.force, options=options)
    if args.json:
        emit(submission.to_dict())
    else:
        note = " (cached result)" if submission.cached else " (already queued)" if submission.existing else ""
        note += " (imported from an archive)" if submission.imported else ""
        print(submission.run_id + note)


def cmd_sweep(args: argparse.Namespace, store: Store) -> None:
    raw = read_json_file(args.grid, what="grid spec")
    submission = submit_sweep(store, raw, force=args.force)
    runs = [store.get_run(run_id) for run_id in submission.run_ids]  # with the stacks they train in
    released = [RunToRelease.of_record(run.spec, stack=run.stack_id, plan=run.plan) for run in runs]
    privacy = privacy_of_sweep(raw, released)  # every point parsed above: this names no new error
    if args.json:
        emit(submission.to_dict() | {"release_best": privacy.to_dict()})
    else:
        counts = f"{submission.created} queued, {submission.cached} cached, {submission.existing} already queued"
        name = " ".join((store.get_sweep(submission.sweep_id).name or generated_sweep_name(raw)).split())[:120]
        runs_text = f"{len(submission.run_ids)} runs ({counts}){_stacks_note(submission)}"
        print(f"sweep {submission.sweep_id} ({name}): {runs_text}")
        print(privacy.sentence())


def _stacks_note(submission: SweepSubmission) -> str:
    if not submission.stacks:
        return ""
    return (
        f"; {submission.stacked} of the queued runs in {submission.stacks} vectorized "
        f"stack{'s' * (submission.stacks > 1)} (at most {settings.stack_max()} runs each)"
    )


def backend_of(args: argparse.Namespace) -> str:
    if args.backend is not None:
        return args.backend
    return "ray" if os.environ.get("RAY_ADDRESS") else "local"


def cmd_worker(args: argparse.Namespace, store: Store) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    backend = backend_of(args)
    if backend == "ray":
        from engine.jobs.workers.ray_backend import RayDispatcher  # Ray is imported only when asked for

        dispatcher = RayDispatcher(
            store, address=args.ray_address, gpus_per_run=args.gpus_per_run, max_in_flight=args.workers
        )
        dispatcher.run(poll_s=args.poll, exit_when_idle=args.once)
        return
    if args.pool_child is not None or args.once:
        if (nice := settings.worker_nice()) and hasattr(os, "nice"):
            os.nice(nice)  # a worker yields the CPU to the dashboard on a shared machine
        datasets = LoadedDatasets(settings.default_data_dirs(), budget_bytes=settings.dataset_cache_bytes())
        if settings.warm_up_enabled():  # before registering: a registered worker is one ready to train at full speed
            took = warmup.warm_up(datasets)
            logging.getLogger("dplab.worker").info("warm-up %s", f"took {took:.1f} s" if took else "failed")
        worker = Worker(store, parent_pid=args.pool_child, datasets=datasets)
        logging.getLogger("dplab.worker").info("started as %s on store %s", worker.name, store.path)
        worker.run_forever(poll_s=args.poll, exit_when_idle=args.once)
        return
    from engine.jobs.workers.pool import WorkerPool

    workers = args.workers if args.workers is not None else settings.default_workers()
    logging.getLogger("dplab.pool").info("%d worker(s) on store %s", workers, store.path)
    WorkerPool(store, workers=workers, poll_s=args.poll).run()


def cmd_runs(args: argparse.Namespace, store: Store) -> None:
    statuses = [RunStatus(s) for s in args.status] if args.status else None
    runs = store.list_runs(limit=args.limit, statuses=statuses, sweep_id=args.sweep)
    if args.json:
        emit([shown_summary(r) for r in runs])
        return
    names = store.run_names()
    for r in runs:
        print(run_line(r, name=names.get(r.id)))


def _shown(value: object, spec: str) -> str:
    """A number formatted, anything else as '?' (a line never fails on an odd record)."""
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "?"


def run_line(r: RunRecord, *, name: str | None = None) -> str:
    """One run of `runs`: id, status, when, its name (`name`, the one the user gave it, else one generated from
    its spec: data, model, what sets its privacy, seed), ε and accuracy (or progress), imported, error."""
    summary = ""
    if isinstance(r.result, dict):
        spent = r.result.get("epsilon")
        epsilon = "∞" if spent is None else epsilon_text(spent, ".3f") if isinstance(spent, float | int) else "?"
        summary = f"ε={epsilon} acc={_shown(r.result.get('test_accuracy'), '.3f')}"
        if isinstance(audit := r.result.get("audit"), dict) and isinstance(audit.get("epsilon"), float | int):
            summary += f" audited ε≥{audit['epsilon']:.3f} (ceiling {_shown(audit.get('ceiling'), '.3f')})"
    elif r.status is RunStatus.RUNNING and r.total_steps:
        summary = f"step {r.progress_step}/{r.total_steps}"
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
    shown = " ".join((name or generated_run_name(r.spec)).split())[:120]
    error = " ".join((r.error or "").split())[:200]
    return f"{r.id}  {r.status.value:9}  {created}  {shown}  {summary}{'  imported' * r.imported}  {error}".rstrip()


def shown_summary(run: RunRecord) -> dict:
    """A run's machine-readable summary, an unbounded ε as ∞ (JSON `Infinity`) even in an older record."""
    return run.summary() | {"result": epsilons_as_inf(run.result)}


def cmd_show(args: argparse.Namespace, store: Store) -> None:
    run = store.get_run(args.run)
    out = {
        **shown_summary(run),
        "plan": run.plan,
        "cancel_requested": run.cancel_requested,
        "events": [
            {"at": e.at, "status": e.status.value, "worker": e.worker, "detail": e.detail} for e in store.events(run.id)
        ],
    }
    if args.metrics:
        out["metrics"] = [
            {"step": s, "name": n, "value": unbounded_as_inf(v) if is_epsilon_name(n) else v}
            for s, n, v in store.metrics(run.id)
        ]
    emit(out)


def cmd_cancel(args: argparse.Namespace, store: Store) -> None:
    status = store.request_cancel(args.run)
    out = {"id": args.run, "status": status.value, "cancel_requested": status is RunStatus.RUNNING}
    if args.json:
        emit(out)
    elif status is RunStatus.CANCELLED:
        print(f"{args.run}: cancelled (it had not started)")
    elif status is RunStatus.RUNNING:
        print(f"{args.run}: cancel requested; it stops at its next step")
    else:
        raise CliError(f"{args.run} is already {status.value}; nothing to cancel")


def _text(value: str) -> str:
    """A run or sweep id as typed: text the store can look up (no NUL, no unpaired surrogate)."""
    if (problem := text_problem(value)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


_positive_int = bounded(NumberRange(low=1, high=256, integer=True))
_positive_int_or_many = bounded(NumberRange(low=1, high=1_000_000, integer=True))
_poll_seconds = bounded(NumberRange(low=0.01, high=60))  # seconds
_gpu_fraction = bounded(NumberRange(low=0, high=8))  # GPUs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a spec in the foreground; last line: the result as JSON")
    p.add_argument("spec", help="path to a spec JSON file ('-' for stdin)")
    p.add_argument("--force", action="store_true", help="train again even if the result is cached")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the result is always JSON")
    p.set_defaults(func=cmd_train, needs_store=True)

    p = sub.add_parser("submit", help="queue a spec for a worker; prints the run id")
    p.add_argument("spec", help="path to a spec JSON file ('-' for stdin)")
    p.add_argument("--force", action="store_true", help="queue a new run even if the result is cached")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_submit, needs_store=True)

    p = sub.add_parser("sweep", help="queue a grid of runs (one or two parameters × values × seeds)")
    p.add_argument("grid", help="path to a grid spec JSON file: {base, grid, seeds, name, vectorize}")
    p.add_argument("--force", action="store_true", help="queue new runs even for points already cached")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep, needs_store=True)

    p = sub.add_parser("worker", help="train queued runs: a pool of local worker processes, or Ray tasks")
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="local worker processes (default: one per GPU, else 1; DPLAB_WORKERS); with --backend ray:"
        " the most runs in flight",
    )
    p.add_argument("--backend", choices=BACKENDS, default=None, help="default: ray when RAY_ADDRESS is set, else local")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else 'auto')")
    p.add_argument(
        "--gpus-per-run",
        type=_gpu_fraction,
        default=None,
        help="Ray: GPUs per run (a fraction lets runs share a GPU; default 0.25 with GPUs)",
    )
    p.add_argument("--once", action="store_true", help="one worker in this process; exit when the queue is empty")
    p.add_argument("--poll", type=_poll_seconds, default=0.5, help="seconds between queue polls when idle")
    p.add_argument("--pool-child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="accepted for uniformity: a worker prints log lines")
    p.set_defaults(func=cmd_worker, needs_store=True)

    p = sub.add_parser("runs", help="list runs, newest first (a sweep's in grid order)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=_positive_int_or_many, default=100)
    p.add_argument("--status", nargs="+", choices=[s.value for s in RunStatus], help="only runs in these statuses")
    p.add_argument("--sweep", type=_text, default=None, help="only the runs of this sweep")
    p.set_defaults(func=cmd_runs, needs_store=True)

    p = sub.add_parser("show", help="one run as JSON: spec, plan, result, status history")
    p.add_argument("run", type=_text)
    p.add_argument("--metrics", action="store_true", help="include every per-step metric")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the output is always JSON")
    p.set_defaults(func=cmd_show, needs_store=True)

    p = sub.add_parser("cancel", help="cancel a queued run (never starts) or a running one (stops within a step)")
    p.add_argument("run", type=_text)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cancel, needs_store=True)

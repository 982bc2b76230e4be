"""`python -m engine`: train, submit, worker, runs, show, cancel, epsilon, calibrate.

The composition root of the engine: the only module that wires training, jobs and the store
together for a terminal user. Errors print one line naming the problem and exit with status 2.
"""

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from cache import RunStatus, Store, StoreError, store_path
from engine import ENGINE_VERSION
from engine.jobs import Worker, default_data_dirs, submit
from engine.jobs.worker import MetricStream, plan_summary
from engine.privacy import PrivacyError, calibrate_noise_multiplier, dpsgd_event, rdp_epsilon
from engine.training import DatasetError, SpecError, dataset_info, parse_spec, plan_dpsgd, train


class CliError(Exception):
    pass


def read_spec(path: str):
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"{path}: cannot read spec ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    return parse_spec(raw)


def emit(obj: Any) -> None:
    print(json.dumps(obj), flush=True)


def cmd_train(args: argparse.Namespace, store: Store) -> None:
    spec = read_spec(args.spec)
    key = spec.cache_key(ENGINE_VERSION)
    if not args.force:
        done = store.find_by_key(key, [RunStatus.FINISHED])
        if done is not None:
            emit({**done.result, "cached": True, "run_id": done.id})
            return
    plan = plan_dpsgd(spec, n_train=dataset_info(spec.dataset).n_train)
    run_id = store.create_run(
        spec=spec.to_dict(), cache_key=key, engine_version=ENGINE_VERSION, status=RunStatus.RUNNING, worker="cli"
    )
    store.set_plan(run_id, plan=plan_summary(plan), total_steps=plan.steps)
    stream = MetricStream(store, run_id)
    last_print = [0.0]

    def on_step(record):
        stream(record)
        if not args.quiet and (time.monotonic() - last_print[0] > 1.0 or record.step == plan.steps):
            last_print[0] = time.monotonic()
            print(f"step {record.step}/{plan.steps}  ε={record.epsilon:.3f}", file=sys.stderr, flush=True)

    try:
        result = train(spec, plan=plan, data_dirs=default_data_dirs(), on_step=on_step)
    except BaseException as exc:
        store.finish(run_id, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    stream.flush()
    store.finish(run_id, status=RunStatus.FINISHED, result=result.to_dict())
    emit({**result.to_dict(), "cached": False, "run_id": run_id})


def cmd_submit(args: argparse.Namespace, store: Store) -> None:
    submission = submit(store, read_spec(args.spec), force=args.force)
    if args.json:
        emit({"id": submission.run_id, "cached": submission.cached, "existing": submission.existing})
    else:
        print(submission.run_id)


def cmd_worker(args: argparse.Namespace, store: Store) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    worker = Worker(store)
    logging.getLogger("dplab.worker").info("started as %s on store %s", worker.name, store.path)
    worker.run_forever(poll_s=args.poll, exit_when_idle=args.once)


def cmd_runs(args: argparse.Namespace, store: Store) -> None:
    runs = store.list_runs(limit=args.limit)
    if args.json:
        emit([r.summary() for r in runs])
        return
    for r in runs:
        eps = f"ε={r.result['epsilon']:.3f} acc={r.result['test_accuracy']:.3f}" if r.result else ""
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
        print(f"{r.id}  {r.status.value:9}  {created}  {r.spec['dataset']}/{r.spec['model']}  {eps}  {r.error or ''}")


def cmd_show(args: argparse.Namespace, store: Store) -> None:
    run = store.get_run(args.run)
    emit({**run.summary(), "plan": run.plan})


def cmd_cancel(args: argparse.Namespace, store: Store) -> None:
    status = store.request_cancel(args.run)
    emit({"id": args.run, "status": status.value, "cancel_requested": status is RunStatus.RUNNING})


def cmd_epsilon(args: argparse.Namespace, store: Store | None) -> None:
    event = dpsgd_event(sampling_rate=args.sampling_rate, noise_multiplier=args.noise_multiplier, steps=args.steps)
    eps, order = rdp_epsilon(event, delta=args.delta)
    emit({"epsilon": eps, "delta": args.delta, "accountant": "rdp", "best_order": order})


def cmd_calibrate(args: argparse.Namespace, store: Store | None) -> None:
    sigma = calibrate_noise_multiplier(
        target_epsilon=args.epsilon, delta=args.delta, sampling_rate=args.sampling_rate, steps=args.steps
    )
    event = dpsgd_event(sampling_rate=args.sampling_rate, noise_multiplier=sigma, steps=args.steps)
    eps, _ = rdp_epsilon(event, delta=args.delta)
    emit({"noise_multiplier": sigma, "epsilon": eps, "delta": args.delta, "accountant": "rdp"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="DP lab engine")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a spec in the foreground; last line: the result as JSON")
    p.add_argument("spec", help="path to a spec JSON file")
    p.add_argument("--force", action="store_true", help="train again even if the result is cached")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_train, needs_store=True)

    p = sub.add_parser("submit", help="queue a spec for a worker; prints the run id")
    p.add_argument("spec")
    p.add_argument("--force", action="store_true", help="queue a new run even if the result is cached")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_submit, needs_store=True)

    p = sub.add_parser("worker", help="run a worker that trains queued runs")
    p.add_argument("--once", action="store_true", help="exit when the queue is empty")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between queue polls when idle")
    p.set_defaults(func=cmd_worker, needs_store=True)

    p = sub.add_parser("runs", help="list runs, newest first")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=100)
    p.set_defaults(func=cmd_runs, needs_store=True)

    p = sub.add_parser("show", help="one run as JSON")
    p.add_argument("run")
    p.set_defaults(func=cmd_show, needs_store=True)

    p = sub.add_parser("cancel", help="cancel a queued or running run")
    p.add_argument("run")
    p.set_defaults(func=cmd_cancel, needs_store=True)

    for name, func, help_text in (
        ("epsilon", cmd_epsilon, "ε of a DP-SGD run by the RDP accountant"),
        ("calibrate", cmd_calibrate, "σ for a target ε by the RDP accountant"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--sampling-rate", type=float, required=True)
        p.add_argument("--steps", type=int, required=True)
        p.add_argument("--delta", type=float, required=True)
        if name == "epsilon":
            p.add_argument("--noise-multiplier", type=float, required=True)
        else:
            p.add_argument("--epsilon", type=float, required=True)
        p.set_defaults(func=func, needs_store=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        store = Store(store_path()) if args.needs_store else None
        args.func(args, store)
    except (CliError, SpecError, DatasetError, PrivacyError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0

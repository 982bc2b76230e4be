"""`python -m engine`: train, submit, worker, runs, show, cancel, epsilon, calibrate, algorithms, datasets,
baseline.

The composition root of the engine: the only module that wires training, jobs and the store
together for a terminal user. Errors print one line naming the problem and exit with status 2.
"""

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from cache import RunStatus, Store, StoreError, store_path
from engine import ENGINE_VERSION
from engine.jobs import Worker, default_data_dirs, submit
from engine.jobs.worker import MetricStream, record_final_epsilons
from engine.privacy import (
    ACCOUNTANTS,
    NotApplicableError,
    PrivacyError,
    calibrate_noise_multiplier,
    dpsgd_step_event,
    panel,
    single_phase,
)
from engine.training import DatasetError, SpecError, describe_algorithms, load_dataset, parse_spec, plan_spec, train
from engine.training.baselines import sklearn_logistic_regression
from engine.training.datasets import describe_datasets

TIGHT_ACCOUNTANTS = ("rdp", "pld")


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
    plan = plan_spec(spec)
    run_id = store.create_run(
        spec=spec.to_dict(), cache_key=key, engine_version=ENGINE_VERSION, status=RunStatus.RUNNING, worker="cli"
    )
    store.set_plan(run_id, plan=plan.summary(), total_steps=plan.steps)
    stream = MetricStream(store, run_id)
    last_print = [0.0]

    def on_step(record):
        stream(record)
        if not args.quiet and (time.monotonic() - last_print[0] > 1.0 or record.step == plan.steps):
            last_print[0] = time.monotonic()
            eps = "not private" if record.epsilon is None else f"ε={record.epsilon:.3f}"
            print(f"step {record.step}/{plan.steps}  {eps}", file=sys.stderr, flush=True)

    try:
        result = train(spec, plan=plan, data_dirs=default_data_dirs(), on_step=on_step)
    except BaseException as exc:
        store.finish(run_id, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    stream.flush()
    record_final_epsilons(store, run_id, result.steps, result.epsilons)
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
        eps = ""
        if r.result:
            spent = r.result.get("epsilon")
            eps = f"ε={spent:.3f}" if spent is not None else "ε=∞"
            eps += f" acc={r.result['test_accuracy']:.3f}"
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
        print(f"{r.id}  {r.status.value:9}  {created}  {r.spec['dataset']}/{r.spec['model']}  {eps}  {r.error or ''}")


def cmd_show(args: argparse.Namespace, store: Store) -> None:
    run = store.get_run(args.run)
    emit({**run.summary(), "plan": run.plan})


def cmd_cancel(args: argparse.Namespace, store: Store) -> None:
    status = store.request_cancel(args.run)
    emit({"id": args.run, "status": status.value, "cancel_requested": status is RunStatus.RUNNING})


def dpsgd_schedule(args: argparse.Namespace) -> tuple[float, int]:
    """(sampling rate q, steps) from --sampling-rate or --dataset-size/--lot-size, and --steps or --epochs."""
    if args.sampling_rate is not None:
        rate = args.sampling_rate
    elif args.dataset_size is not None and args.lot_size is not None:
        if not 1 <= args.lot_size <= args.dataset_size:
            raise CliError(f"--lot-size must be in [1, --dataset-size={args.dataset_size}], got {args.lot_size}")
        rate = args.lot_size / args.dataset_size
    else:
        raise CliError("give --sampling-rate, or --dataset-size with --lot-size")
    if not 0 < rate <= 1:
        raise CliError(f"--sampling-rate must be in (0, 1], got {rate}")
    if args.steps is not None:
        steps = args.steps
    elif args.epochs is not None:
        steps = math.ceil(args.epochs / rate - 1e-9)
    else:
        raise CliError("give --steps, or --epochs")
    if steps < 1:
        raise CliError(f"--steps must be >= 1, got {steps}")
    return rate, steps


def cmd_epsilon(args: argparse.Namespace, store: Store | None) -> None:
    rate, steps = dpsgd_schedule(args)
    ledger = single_phase(dpsgd_step_event(sampling_rate=rate, noise_multiplier=args.noise_multiplier), steps)
    names = (args.accountant,) if args.accountant else tuple(ACCOUNTANTS)
    accounts = panel(ledger, delta=args.delta, names=names)
    name, eps = accounts.tightest()
    out = {"epsilon": eps, "accountant": name, "delta": args.delta, "sampling_rate": rate, "steps": steps}
    if "rdp" in accounts.curves:
        out |= {"best_order": accounts.curves["rdp"].final_order, "order_at_edge": accounts.curves["rdp"].order_at_edge}
    if args.all:
        out |= {"epsilons": accounts.final(), "not_applicable": accounts.not_applicable}
    emit(out)


def cmd_calibrate(args: argparse.Namespace, store: Store | None) -> None:
    rate, steps = dpsgd_schedule(args)
    # By default the two tight accountants: for Gaussian DP-SGD the composition theorems never win.
    names = (args.accountant,) if args.accountant else tuple(ACCOUNTANTS) if args.all else TIGHT_ACCOUNTANTS
    sigmas, missing = {}, {}
    for name in names:
        try:
            sigmas[name] = calibrate_noise_multiplier(
                target_epsilon=args.epsilon, delta=args.delta, sampling_rate=rate, steps=steps, accountant_name=name
            )
        except NotApplicableError as exc:
            missing[name] = str(exc)
    if not sigmas:
        raise CliError("no accountant applies: " + "; ".join(missing.values()))
    name, sigma = min(sigmas.items(), key=lambda item: item[1])
    out = {"noise_multiplier": sigma, "accountant": name, "epsilon": args.epsilon, "delta": args.delta,
           "sampling_rate": rate, "steps": steps}  # fmt: skip
    if args.all:
        out |= {"noise_multipliers": sigmas, "not_applicable": missing}
    emit(out)


def cmd_algorithms(args: argparse.Namespace, store: Store | None) -> None:
    _listing(describe_algorithms(), args.json)


def cmd_datasets(args: argparse.Namespace, store: Store | None) -> None:
    _listing(describe_datasets(), args.json)


def _listing(items: list[dict], as_json: bool) -> None:
    if as_json:
        emit(items)
        return
    width = max(len(i["name"]) for i in items)
    for item in items:
        kind = f"[{item['kind']}] " if "kind" in item else ""
        source = f" ({item['source']})" if item.get("source") else ""
        print(f"{item['name']:<{width}}  {kind}{item['description']}{source}")


def cmd_baseline(args: argparse.Namespace, store: Store | None) -> None:
    data = load_dataset(args.dataset, default_data_dirs())
    started = time.perf_counter()
    result = sklearn_logistic_regression(data)
    emit({"dataset": args.dataset, "baseline": result.name, "test_accuracy": result.test_accuracy,
          "majority_class_accuracy": result.majority_class_accuracy, "seconds": time.perf_counter() - started,
          "private": False})  # fmt: skip


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
        ("epsilon", cmd_epsilon, "ε of a Poisson DP-SGD run (default: the tightest accountant that applies)"),
        ("calibrate", cmd_calibrate, "the smallest σ meeting a target ε (default: the tightest accountant)"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--sampling-rate", type=float, help="q; or give --dataset-size and --lot-size")
        p.add_argument("--dataset-size", type=int, help="N")
        p.add_argument("--lot-size", type=int, help="expected lot size L (q = L/N)")
        p.add_argument("--steps", type=int, help="T; or give --epochs (T = ⌈epochs / q⌉)")
        p.add_argument("--epochs", type=float)
        p.add_argument("--delta", type=float, required=True)
        p.add_argument("--accountant", choices=list(ACCOUNTANTS), help="one accountant instead of the tightest")
        p.add_argument("--all", action="store_true", help="every accountant's answer in one JSON object")
        if name == "epsilon":
            p.add_argument("--noise-multiplier", type=float, required=True)
        else:
            p.add_argument("--epsilon", type=float, required=True)
        p.set_defaults(func=func, needs_store=False)
    for name, func, help_text in (
        ("algorithms", cmd_algorithms, "the algorithms, preprocessing, models and update rules the engine has"),
        ("datasets", cmd_datasets, "the datasets the engine can load"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func, needs_store=False)

    p = sub.add_parser("baseline", help="scikit-learn's non-private logistic regression on a dataset")
    p.add_argument("dataset")
    p.set_defaults(func=cmd_baseline, needs_store=False)
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

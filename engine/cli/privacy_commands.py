"""`epsilon` and `calibrate`: ε of a Poisson DP-SGD schedule, or the σ that meets a target ε."""

import argparse

from cache import Store
from engine.cli.common import CliError, bounded, emit
from engine.privacy import (
    ACCOUNTANTS,
    NotApplicableError,
    UnreachableTargetError,
    calibrate_noise_multiplier,
    dpsgd_step_event,
    limits,
    panel,
    single_phase,
)
from engine.privacy.limits import NumberRange
from engine.privacy.planning import sampling_rate, steps_at_rate

DATASET_SIZE = NumberRange(low=1, high=10**9, integer=True)
EPOCHS = NumberRange(low=0.0, high=10**6, low_open=True)
DELTA = NumberRange(low=0.0, high=1.0, low_open=True, high_open=True)  # any (ε, δ) statement; runs allow ≤ 0.1

TIGHT_ACCOUNTANTS = ("rdp", "pld")


def dpsgd_schedule(args: argparse.Namespace) -> tuple[float, int]:
    """(sampling rate q, steps) from --sampling-rate or --dataset-size/--lot-size, and --steps or --epochs."""
    if args.sampling_rate is not None:
        rate = args.sampling_rate
    elif args.dataset_size is not None and args.lot_size is not None:
        if not 1 <= args.lot_size <= args.dataset_size:
            raise CliError(f"--lot-size must be in [1, --dataset-size={args.dataset_size}], got {args.lot_size}")
        rate = sampling_rate(lot_size=args.lot_size, n_train=args.dataset_size)
    else:
        raise CliError("give --sampling-rate, or --dataset-size with --lot-size")
    if args.steps is not None:
        steps = args.steps
    elif args.epochs is not None:
        steps = steps_at_rate(epochs=args.epochs, sampling_rate=rate)
        if limits.ACCOUNTED_STEPS.problem(steps) is not None:
            raise CliError(
                f"--epochs {args.epochs:g} at sampling rate {rate:g} is {steps:,} steps; "
                f"--steps must be {limits.ACCOUNTED_STEPS.describe()}"
            )
    else:
        raise CliError("give --steps, or --epochs")
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
        except UnreachableTargetError as exc:
            if len(names) == 1:
                raise
            missing[name] = str(exc)  # --all: another accountant may reach it
    if not sigmas:
        raise CliError("no accountant applies: " + "; ".join(missing.values()))
    name, sigma = min(sigmas.items(), key=lambda item: item[1])
    out = {
        "noise_multiplier": sigma,
        "accountant": name,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "sampling_rate": rate,
        "steps": steps,
    }
    if args.all:
        out |= {"noise_multipliers": sigmas, "not_applicable": missing}
    emit(out)


def register(sub: argparse._SubParsersAction) -> None:
    for name, func, help_text in (
        ("epsilon", cmd_epsilon, "ε of a Poisson DP-SGD run (default: the tightest accountant that applies)"),
        ("calibrate", cmd_calibrate, "the smallest σ meeting a target ε (default: the tightest accountant)"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument(
            "--sampling-rate", type=bounded(limits.SAMPLING_RATE), help="q; or give --dataset-size and --lot-size"
        )
        p.add_argument("--dataset-size", type=bounded(DATASET_SIZE), help="N")
        p.add_argument("--lot-size", type=bounded(DATASET_SIZE), help="expected lot size L (q = L/N)")
        p.add_argument("--steps", type=bounded(limits.ACCOUNTED_STEPS), help="T; or give --epochs (T = ⌈epochs / q⌉)")
        p.add_argument("--epochs", type=bounded(EPOCHS))
        p.add_argument("--delta", type=bounded(DELTA), required=True)
        p.add_argument("--accountant", choices=list(ACCOUNTANTS), help="one accountant instead of the tightest")
        p.add_argument("--all", action="store_true", help="every accountant's answer in one JSON object")
        p.add_argument("--json", action="store_true", help="accepted for uniformity: the output is always JSON")
        if name == "epsilon":
            p.add_argument("--noise-multiplier", type=bounded(limits.NOISE_MULTIPLIER), required=True)
        else:
            p.add_argument("--epsilon", type=bounded(limits.TARGET_EPSILON), required=True)
        p.set_defaults(func=func, needs_store=False)

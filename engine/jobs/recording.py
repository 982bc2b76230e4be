"""The store side of a run, wherever it trains: record the plan, compute the other accountants'
curves beside the run (`BackgroundAccounting`), write metric batches, and end the run with its
result, its error, or cancelled with the metrics it has (`RunRecorder`). The runs of a stack start
together (`start_stack`), so runs with equal privacy ledgers share their curves' computation."""

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cache import RunRecord, RunStatus, Store
from engine.jobs.release import restarted
from engine.jobs.run_training import MetricRows
from engine.metric_names import STREAMED_ACCOUNTANT, epsilon_metric
from engine.privacy import ACCOUNTANTS, NotApplicableError, accountant
from engine.privacy.accountants import pld
from engine.training import TrainingPlan, parse_spec, plan_spec

log = logging.getLogger("dplab.worker")
ACCOUNTANT_GRID_POINTS = 24
BACKGROUND_NICE = 5  # the background curves yield the CPU to the training they describe


def lower_thread_priority(increment: int) -> None:
    """Lower the calling thread's CPU priority (Linux schedules threads, so `setpriority` on the thread's id
    touches that thread only); elsewhere, or where not allowed, nothing happens."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment))
    except (AttributeError, OSError):
        pass


def background_accountants() -> tuple[list[str], list[str]]:
    """The accountants whose curves the recorder computes beside a run, in the registry's order: the live ones
    (vectorized over the grid), then the others (point by point). The streamed one is the trainer's."""
    others = [name for name in ACCOUNTANTS if name != STREAMED_ACCOUNTANT]
    return [n for n in others if ACCOUNTANTS[n].live], [n for n in others if not ACCOUNTANTS[n].live]


@dataclass(frozen=True, kw_only=True)
class Curves:
    """The accountants' curves of one plan's privacy ledger, for every run in `run_ids` (runs of one
    stack whose plans have equal ledgers and δ: the same numbers, computed once)."""

    run_ids: tuple[str, ...]
    plan: TrainingPlan


class BackgroundAccounting:
    """Computes the other accountants' ε curves on a grid of steps while the runs train (never on the
    UI thread), writing each to the store as soon as it is ready. One thread for all `curves` (the
    distinct ledgers of a stack take turns), so K runs slow their training no more than one. PLD costs
    ~0.1–1 s a point, so it goes last, one point at a time, and stops with the runs."""

    def __init__(self, store: Store, curves: Sequence[Curves]):
        self.store, self.curves = store, tuple(curves)
        self.stop = threading.Event()
        self.starting, self.started = threading.Lock(), False
        self.thread = threading.Thread(target=self._run, name=f"accounting-{curves[0].run_ids[0]}", daemon=True)

    def __enter__(self) -> "BackgroundAccounting":
        self.begin()
        return self

    def begin(self) -> None:
        """Start the thread (once; later calls do nothing). The recorders call it when their run's first point is
        stored: before it, the accountants would share the interpreter with the loading and the first step, and
        the first point is the wait a user feels."""
        with self.starting:
            if not self.started and not self.stop.is_set():
                self.started = True
                self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self.starting:
            self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _write(self, run_ids: Sequence[str], name: str, steps, epsilons) -> None:
        rows = [(int(t), {epsilon_metric(name): float(e)}) for t, e in zip(steps, epsilons, strict=True)]
        for run_id in run_ids:
            self.store.append_metrics(run_id, rows, advance=False)

    def _write_point(self, run_ids, name: str, ledger, delta: float, t: int, intervals: list[float], k: int) -> None:
        """One point of a slow accountant's curve. PLD chooses its interval once for the whole ledger (at the
        first point) and keeps it; any other accountant answers at the one step."""
        if name == pld.NAME:
            if not intervals[k]:
                intervals[k] = pld.choose_discretization(ledger, delta=delta)
            epsilon = pld.epsilon_of(ledger.truncated(t), delta=delta, discretization=intervals[k])
        else:
            try:
                epsilon = accountant(name).curve(ledger, delta=delta, steps=np.array([t])).final_epsilon
            except NotApplicableError:
                return
        self._write(run_ids, name, [t], [epsilon])

    def _run(self) -> None:
        lower_thread_priority(BACKGROUND_NICE)
        ledgers = [
            (c.run_ids, ledger, c.plan.delta, pld.grid(ledger.steps, ACCOUNTANT_GRID_POINTS))
            for c in self.curves
            if (ledger := c.plan.ledger()) is not None
        ]  # none: not private
        intervals = [0.0] * len(ledgers)
        live, slow = background_accountants()
        try:
            for name in live:
                for run_ids, ledger, delta, steps in ledgers:
                    if self.stop.is_set():
                        return
                    try:
                        curve = accountant(name).curve(ledger, delta=delta, steps=steps)
                    except NotApplicableError:
                        continue
                    self._write(run_ids, name, curve.steps, curve.epsilons)
            for point in range(ACCOUNTANT_GRID_POINTS):
                for name in slow:
                    for k, (run_ids, ledger, delta, steps) in enumerate(ledgers):
                        if self.stop.is_set():
                            return
                        if point < len(steps):
                            self._write_point(run_ids, name, ledger, delta, int(steps[point]), intervals, k)
        except Exception:  # best effort beside the runs: the final ε of every accountant is computed exactly
            log.exception("runs %s: background accounting failed", ", ".join(c.run_ids[0] for c in self.curves))


def record_final_epsilons(store: Store, run_id: str, steps: int, epsilons: dict[str, float]) -> None:
    """End every accountant's curve at the steps actually taken, with the exact final values."""
    others = {epsilon_metric(n): e for n, e in epsilons.items() if n != STREAMED_ACCOUNTANT}
    if not others:
        return
    store.trim_metrics(run_id, names=list(others), after_step=steps)
    store.append_metrics(run_id, [(steps, others)], advance=False)


class RunRecorder:
    """The store side of one claimed run, wherever it trains. `start` records the plan and prepares
    the background accountants, which begin once `write` has stored the first metric batch (`write` returns
    whether a cancel was asked);
    `finished`, `failed` and `requeue` end it, only if `worker` still owns the run."""

    def __init__(self, store: Store, run: RunRecord, *, worker: str):
        self.store, self.run, self.worker = store, run, worker
        self.accounting: BackgroundAccounting | None = None
        self.cancel_requested = False

    def start(self) -> TrainingPlan:
        plan = self.record_plan()
        self.accounting = BackgroundAccounting(self.store, [Curves(run_ids=(self.run.id,), plan=plan)])
        return plan

    def record_plan(self) -> TrainingPlan:
        """Plan the run and record the plan; `start` without the background accountants. A run that restarted
        charges what its earlier attempts released (`engine.privacy.restarts`): its lab-mode noise replays them,
        its release-mode noise is fresh."""
        planned = (self.run.plan or {}).get("noise_multiplier")  # σ planned at submission: checked, not trusted
        spec = parse_spec(self.run.spec)
        released = [int(a["steps"]) for a in self.run.earlier_attempts if a.get("released")]
        plan = restarted(plan_spec(spec, sigma_hint=planned), spec, released)
        self.store.set_plan(self.run.id, plan=plan.summary(), total_steps=plan.steps)
        return plan

    def write(self, rows: MetricRows) -> bool:
        if rows:
            self.cancel_requested = self.store.append_metrics(self.run.id, rows) or self.cancel_requested
            if self.accounting is not None:
                self.accounting.begin()  # from the first point on
        return self.cancel_requested

    def _close(self) -> None:
        if self.accounting is not None:
            self.accounting.close()

    def finished(self, result: dict[str, Any]) -> RunStatus:
        """A run that trained to its end (FINISHED) or was stopped by a cancel request (CANCELLED)."""
        self._close()
        record_final_epsilons(self.store, self.run.id, result["steps"], result["epsilons"])
        status = RunStatus.CANCELLED if result["stopped_early"] else RunStatus.FINISHED
        self.store.finish(self.run.id, status=status, result=result, worker=self.worker)
        return status

    def cancelled_without_result(self) -> None:
        """A run whose training was killed on a cancel request: CANCELLED with the metrics it streamed,
        no accountant curve past the last step it reported."""
        self._close()
        self._trim_curves()
        self.store.finish(self.run.id, status=RunStatus.CANCELLED, worker=self.worker)

    def _trim_curves(self) -> None:
        """No accountant curve past the last step the run reported (the background computes them ahead)."""
        names = [epsilon_metric(n) for n in ACCOUNTANTS if n != STREAMED_ACCOUNTANT]
        self.store.trim_metrics(self.run.id, names=names, after_step=self.store.get_run(self.run.id).progress_step)

    def lost(self, reason: str) -> None:
        """The process training the run died: failed with `reason` ("worker lost: ..."), or requeued once."""
        self._close()
        self.store.lose_run(self.run.id, worker=self.worker, reason=reason)

    def failed(self, error: str) -> None:
        """FAILED with `error`, the metrics it streamed and no accountant curve past its last step."""
        self._close()
        self._trim_curves()
        self.store.finish(self.run.id, status=RunStatus.FAILED, error=error, worker=self.worker)

    def requeue(self, reason: str) -> None:
        self._close()
        self.store.requeue(self.run.id, worker=self.worker, reason=reason)


def start_stack(recorders: Sequence[RunRecorder]) -> list[TrainingPlan]:
    """`start` for the runs of one stack, which end together: each records its plan, then one
    BackgroundAccounting, which any of them closes, computes the curves of each distinct privacy ledger
    and δ once (a seed or learning-rate grid has one). Returns the plans, in order."""
    plans = [recorder.record_plan() for recorder in recorders]
    groups: list[tuple[Any, TrainingPlan, list[str]]] = []  # (ledger and δ, a plan with them, their runs)
    for recorder, plan in zip(recorders, plans, strict=True):
        key = (plan.ledger(), plan.delta)  # compared, not hashed: a composed DP event holds a list
        same = next((run_ids for other, _, run_ids in groups if other == key), None)
        if same is None:
            groups.append((key, plan, [recorder.run.id]))
        else:
            same.append(recorder.run.id)
    curves = [Curves(run_ids=tuple(run_ids), plan=plan) for _, plan, run_ids in groups]
    accounting = BackgroundAccounting(recorders[0].store, curves)  # begins with the first stored point
    for recorder in recorders:
        recorder.accounting = accounting
    return plans

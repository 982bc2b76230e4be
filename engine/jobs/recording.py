"""The store side of a run, wherever it trains: record the plan, compute the other accountants'
curves beside the run (`BackgroundAccounting`), write metric batches, and end the run with its
result, its error, or cancelled with the metrics it has (`RunRecorder`)."""

import logging
import os
import threading
from typing import Any

from cache import RunRecord, RunStatus, Store
from engine.jobs.run_training import MetricRows
from engine.privacy import NotApplicableError, accountant
from engine.privacy.accountants import pld
from engine.training import TrainingPlan, parse_spec, plan_spec

log = logging.getLogger("dplab.worker")
CHEAP_ACCOUNTANTS = ("naive", "advanced", "zcdp")  # vectorized over the grid; RDP streams with the steps
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


def metric_name(accountant_name: str) -> str:
    return f"epsilon_{accountant_name}"


class BackgroundAccounting:
    """Computes the other accountants' ε curves on a grid of steps while the run trains (never on the
    UI thread), writing each to the store as soon as it is ready. PLD costs ~0.1–1 s a point, so it
    goes last, one point at a time, and stops with the run."""

    def __init__(self, store: Store, run_id: str, plan: TrainingPlan):
        self.store, self.run_id, self.plan = store, run_id, plan
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"accounting-{run_id}", daemon=True)

    def __enter__(self) -> "BackgroundAccounting":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _write(self, name: str, steps, epsilons) -> None:
        rows = [(int(t), {metric_name(name): float(e)}) for t, e in zip(steps, epsilons, strict=True)]
        self.store.append_metrics(self.run_id, rows, advance=False)

    def _run(self) -> None:
        lower_thread_priority(BACKGROUND_NICE)
        ledger, delta = self.plan.ledger(), self.plan.delta
        if ledger is None:  # not private: nothing to account
            return
        steps = pld.grid(ledger.steps, ACCOUNTANT_GRID_POINTS)
        try:
            for name in CHEAP_ACCOUNTANTS:
                if self.stop.is_set():
                    return
                try:
                    curve = accountant(name).curve(ledger, delta=delta, steps=steps)
                except NotApplicableError:
                    continue
                self._write(name, curve.steps, curve.epsilons)
            for t in steps:
                if self.stop.is_set():
                    return
                self._write("pld", [t], [pld.epsilon_of(ledger.truncated(int(t)), delta=delta)])
        except Exception:  # best effort beside the run: the final ε of every accountant is computed exactly
            log.exception("run %s: background accounting failed", self.run_id)


def record_final_epsilons(store: Store, run_id: str, steps: int, epsilons: dict[str, float]) -> None:
    """End every accountant's curve at the steps actually taken, with the exact final values."""
    others = {metric_name(n): e for n, e in epsilons.items() if n != "rdp"}
    if not others:
        return
    store.trim_metrics(run_id, names=list(others), after_step=steps)
    store.append_metrics(run_id, [(steps, others)], advance=False)


class RunRecorder:
    """The store side of one claimed run, wherever it trains. `start` records the plan and starts
    the background accountants; `write` stores a metric batch (returns whether a cancel was asked);
    `finished`, `failed` and `requeue` end it, only if `worker` still owns the run."""

    def __init__(self, store: Store, run: RunRecord, *, worker: str):
        self.store, self.run, self.worker = store, run, worker
        self.accounting: BackgroundAccounting | None = None
        self.cancel_requested = False

    def start(self) -> TrainingPlan:
        planned = (self.run.plan or {}).get("noise_multiplier")  # σ planned at submission: checked, not trusted
        plan = plan_spec(parse_spec(self.run.spec), sigma_hint=planned)
        self.store.set_plan(self.run.id, plan=plan.summary(), total_steps=plan.steps)
        self.accounting = BackgroundAccounting(self.store, self.run.id, plan).__enter__()
        return plan

    def write(self, rows: MetricRows) -> bool:
        if rows:
            self.cancel_requested = self.store.append_metrics(self.run.id, rows) or self.cancel_requested
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
        names = [metric_name(n) for n in (*CHEAP_ACCOUNTANTS, "pld")]
        self.store.trim_metrics(self.run.id, names=names, after_step=self.store.get_run(self.run.id).progress_step)
        self.store.finish(self.run.id, status=RunStatus.CANCELLED, worker=self.worker)

    def lost(self, reason: str) -> None:
        """The process training the run died: failed with `reason` ("worker lost: ..."), or requeued once."""
        self._close()
        self.store.lose_run(self.run.id, worker=self.worker, reason=reason)

    def failed(self, error: str) -> None:
        self._close()
        self.store.finish(self.run.id, status=RunStatus.FAILED, error=error, worker=self.worker)

    def requeue(self, reason: str) -> None:
        self._close()
        self.store.requeue(self.run.id, worker=self.worker, reason=reason)

"""The worker loop: claim a queued run, train it, stream metrics to the store in batches, and mark
it finished, failed (with the error) or cancelled. SIGTERM/SIGINT put the run in hand back in the
queue, so stopping the dashboard never loses a run."""

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from cache import RunRecord, RunStatus, Store, datasets_dir
from engine.privacy import NotApplicableError, accountant
from engine.privacy.accountants import pld
from engine.training import StepRecord, TrainingPlan, parse_spec, plan_spec, train

log = logging.getLogger("dplab.worker")
FLUSH_EVERY_S = 0.3
STALE_AFTER_S = 120.0


def default_data_dirs() -> list[Path]:
    """Where datasets are read from: `DPLAB_DATA_DIR` first, then the data home's download folder."""
    dirs = [Path(p) for p in os.environ.get("DPLAB_DATA_DIR", "").split(os.pathsep) if p]
    return [*dirs, datasets_dir()]


CHEAP_ACCOUNTANTS = ("naive", "advanced", "zcdp")  # vectorized over the grid; RDP streams with the steps
ACCOUNTANT_GRID_POINTS = 24


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
        self.stop.set()
        self.thread.join()

    def _write(self, name: str, steps, epsilons) -> None:
        rows = [(int(t), {metric_name(name): float(e)}) for t, e in zip(steps, epsilons, strict=True)]
        self.store.append_metrics(self.run_id, rows, advance=False)

    def _run(self) -> None:
        ledger, delta = self.plan.ledger(), self.plan.delta
        if ledger is None:  # not private: nothing to account
            return
        steps = pld.grid(ledger.steps, ACCOUNTANT_GRID_POINTS)
        try:
            for name in CHEAP_ACCOUNTANTS:
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
    store.trim_metrics(run_id, names=list(others), after_step=steps)
    store.append_metrics(run_id, [(steps, others)], advance=False)


class Shutdown(Exception):
    """A second SIGTERM/SIGINT: stop now."""


class MetricStream:
    """Buffers step records and writes them to the store at most every FLUSH_EVERY_S seconds."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.run_id = store, run_id
        self.pending: list[tuple[int, dict[str, float]]] = []
        self.last_flush = time.monotonic()
        self.cancel_requested = False

    def __call__(self, record: StepRecord) -> None:
        self.pending.append((record.step, record.metrics()))
        if time.monotonic() - self.last_flush >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.cancel_requested = self.store.append_metrics(self.run_id, self.pending)
            self.pending = []
        self.last_flush = time.monotonic()


class Worker:
    def __init__(self, store: Store, *, data_dirs: Sequence[Path] | None = None, name: str | None = None):
        self.store = store
        self.data_dirs = list(data_dirs) if data_dirs is not None else default_data_dirs()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.stopping = False

    def run_forever(self, *, poll_s: float = 0.5, exit_when_idle: bool = False) -> int:
        """Process runs until stopped (or until the queue is empty, if `exit_when_idle`)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        processed = 0
        last_reap = float("-inf")
        try:
            while not self.stopping:
                if time.monotonic() - last_reap > STALE_AFTER_S / 4:
                    self.reap_stale_runs()
                    last_reap = time.monotonic()
                if self.run_one() is None:
                    if exit_when_idle:
                        break
                    time.sleep(poll_s)
                else:
                    processed += 1
        except Shutdown:
            log.info("stopped")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return processed

    def reap_stale_runs(self) -> None:
        """Mark runs whose worker died (no heartbeat for STALE_AFTER_S) as failed: worker lost."""
        for run_id in self.store.fail_stale(older_than_s=STALE_AFTER_S):
            log.warning("run %s: marked failed, its worker stopped sending heartbeats", run_id)

    def _on_signal(self, signum: int, frame: object) -> None:
        """The first signal stops the worker after the current step; a second one at once."""
        if self.stopping:
            raise Shutdown(signal.Signals(signum).name)
        self.stopping = True

    def run_one(self) -> RunRecord | None:
        run = self.store.claim_next(self.name)
        if run is None:
            return None
        log.info("run %s: claimed", run.id)
        stream = MetricStream(self.store, run.id)
        try:
            spec = parse_spec(run.spec)
            plan = plan_spec(spec)
            self.store.set_plan(run.id, plan=plan.summary(), total_steps=plan.steps)
            with BackgroundAccounting(self.store, run.id, plan):
                result = train(
                    spec,
                    plan=plan,
                    data_dirs=self.data_dirs,
                    on_step=stream,
                    should_stop=lambda: stream.cancel_requested or self.stopping,
                )
            stream.flush()
            record_final_epsilons(self.store, run.id, result.steps, result.epsilons)
            if result.stopped_early and not stream.cancel_requested:
                raise Shutdown("worker stopping")
            status = RunStatus.CANCELLED if result.stopped_early else RunStatus.FINISHED
            self.store.finish(run.id, status=status, result=result.to_dict())
            log.info("run %s: %s", run.id, status.value)
        except Shutdown:
            self.store.requeue(run.id)
            log.info("run %s: put back in the queue (worker stopping)", run.id)
            self.stopping = True
        except Exception as exc:  # any failure is recorded on the run, the worker goes on
            stream.pending.clear()
            self.store.finish(run.id, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            log.error("run %s failed:\n%s", run.id, traceback.format_exc())
        return self.store.get_run(run.id)

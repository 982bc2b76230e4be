"""The worker loop: claim a queued run, train it, stream metrics to the store in batches, and mark
it finished, failed (with the error) or cancelled. SIGTERM/SIGINT put the run in hand back in the
queue, so stopping the dashboard never loses a run."""

import logging
import os
import signal
import socket
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from cache import RunRecord, RunStatus, Store, datasets_dir
from engine.training import DpSgdPlan, StepRecord, dataset_info, parse_spec, plan_dpsgd, train

log = logging.getLogger("dplab.worker")
FLUSH_EVERY_S = 0.3
STALE_AFTER_S = 120.0


def default_data_dirs() -> list[Path]:
    """Where datasets are read from: `DPLAB_DATA_DIR` first, then the data home's download folder."""
    dirs = [Path(p) for p in os.environ.get("DPLAB_DATA_DIR", "").split(os.pathsep) if p]
    return [*dirs, datasets_dir()]


def plan_summary(plan: DpSgdPlan) -> dict[str, float]:
    """The public numbers of a plan, as stored beside the run."""
    return {**asdict(plan), "sampling_rate": plan.sampling_rate, "noise_std": plan.noise_std}


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
            plan = plan_dpsgd(spec, n_train=dataset_info(spec.dataset).n_train)
            self.store.set_plan(run.id, plan=plan_summary(plan), total_steps=plan.steps)
            result = train(
                spec,
                plan=plan,
                data_dirs=self.data_dirs,
                on_step=stream,
                should_stop=lambda: stream.cancel_requested or self.stopping,
            )
            stream.flush()
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

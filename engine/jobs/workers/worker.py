"""The local worker loop: claim a queued run, train it, stream metrics to the store in batches, and
end it finished, failed (with the error) or cancelled (with its metrics).

A queued run with a stack id is claimed with the other queued runs of its stack, and they train
together as one vectorized model (`train_claimed_stack`), each recorded as its own run: a cancel
stops its run only, while a worker stopping puts them all back in the queue and an error fails them all.

A heartbeat thread tells the store every `DPLAB_HEARTBEAT_S` that the worker and its runs are alive,
and picks up cancel requests, so a cancel stops the run at the next step even when no metrics are
due. Any worker also reaps runs whose heartbeat went stale (their worker was killed, ran out of
memory or lost its machine). SIGTERM/SIGINT put the runs in hand back in the queue; a second signal
stops at once. A worker started by a pool (`parent_pid`) whose pool dies finishes its runs and exits.

A full disk stops no worker: a run whose metrics or result cannot be written fails, and its failure
("the disk holding the store is full ...") is written as soon as there is room again (`_write_end`), while the
worker waits, claiming nothing; a worker told to stop meanwhile leaves the run to the stale-heartbeat reaper.
"""

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from cache import RunRecord, Store, StoreFull, StoreUnusable
from engine.jobs import settings
from engine.jobs.recording import RunRecorder, start_stack
from engine.jobs.run_training import StopTraining, train_claimed, train_claimed_stack
from engine.jobs.workers.datasets import LoadedDatasets
from engine.training import pick_device

log = logging.getLogger("dplab.worker")
FULL_RETRY_S = 5.0  # how often a worker retries a write refused by a full disk


def failure_reason(exc: BaseException) -> str:
    """What a failed run records: the exception's kind and message."""
    return f"{type(exc).__name__}: {exc}"


class Shutdown(Exception):
    """A second SIGTERM/SIGINT: stop now."""


class Heartbeat:
    """A daemon thread beating for `worker` and its current runs (`run_ids`) every `every_s` seconds."""

    def __init__(self, store: Store, worker: str, *, every_s: float):
        self.store, self.worker, self.every_s = store, worker, every_s
        self.run_ids: tuple[str, ...] = ()
        self.cancelled: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"heartbeat-{worker}", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def beat(self) -> None:
        self.cancelled |= self.store.heartbeat(self.worker, list(self.run_ids))

    def _beat(self) -> None:
        unusable = False  # a full disk or a damaged store fails every beat: one line until a beat gets through
        while not self.stop.wait(self.every_s):
            try:
                self.beat()
                unusable = False
            except StoreUnusable as exc:
                if not unusable:
                    log.warning("heartbeats fail until the store can be written again: %s", exc)
                unusable = True
            except Exception:  # a missed beat is not fatal; the stale timeout is several beats long
                log.exception("heartbeat failed")


class Worker:
    def __init__(
        self,
        store: Store,
        *,
        data_dirs: Sequence[Path] | None = None,
        name: str | None = None,
        parent_pid: int | None = None,
        datasets: LoadedDatasets | None = None,
    ):
        self.store = store
        self.data_dirs = list(data_dirs) if data_dirs is not None else settings.default_data_dirs()
        if datasets is None:
            datasets = LoadedDatasets(self.data_dirs, budget_bytes=settings.dataset_cache_bytes())
        self.datasets = datasets  # kept between runs: a run's first point does not wait for files
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.parent_pid = parent_pid
        self.stopping = False
        self.heartbeat = Heartbeat(store, self.name, every_s=settings.heartbeat_s())
        store.register_worker(
            self.name, backend="local", host=socket.gethostname(), pid=os.getpid(), device=str(pick_device())
        )

    def orphaned(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    def run_forever(self, *, poll_s: float = 0.5, exit_when_idle: bool = False) -> int:
        """Process runs until stopped (or until the queue is empty, if `exit_when_idle`)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        processed, last_reap, reason = 0, float("-inf"), "stopped"
        try:
            with self.heartbeat:
                while not self.stopping:
                    if self.orphaned():
                        reason = "its pool exited"
                        break
                    try:
                        if time.monotonic() - last_reap > settings.stale_after_s() / 4:
                            self.reap_stale_runs()
                            last_reap = time.monotonic()
                        runs = self.run_next()
                    except StoreFull as exc:  # nothing claimed: wait for room
                        log.error("%s; waiting %.0f s", exc, FULL_RETRY_S)
                        time.sleep(FULL_RETRY_S)
                        continue
                    if not runs:
                        if exit_when_idle:
                            reason = "queue empty"
                            break
                        time.sleep(poll_s)
                    processed += len(runs)
        except Shutdown:
            log.info("stopped")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stopping = True  # one try: a full disk does not hold the worker's exit
            self._write_end(partial(self.store.worker_stopped, self.name, reason=reason), "worker stopped")
        return processed

    def _write_end(self, write: Callable[[], object], what: str) -> bool:
        """`write` (the end of a run, or of the worker) retried every `FULL_RETRY_S` while the disk holding the
        store is full, until it is written or the worker is told to stop (then a run in hand goes to the
        stale-heartbeat reaper: failed as "worker lost", or requeued). Whether it was written."""
        while True:
            try:
                write()
                return True
            except StoreFull as exc:
                if self.stopping:
                    log.error("%s: not recorded (%s); the worker is stopping", what, exc)
                    return False
                log.error("%s: not recorded yet (%s); retrying in %.0f s", what, exc, FULL_RETRY_S)
                time.sleep(FULL_RETRY_S)

    def reap_stale_runs(self) -> None:
        """Runs whose worker stopped sending heartbeats: failed ("worker lost"), or requeued once."""
        for lost in self.store.fail_stale(older_than_s=settings.stale_after_s()):
            log.warning("run %s: worker lost, %s", lost.run_id, "requeued" if lost.requeued else "marked failed")

    def _on_signal(self, signum: int, frame: object) -> None:
        """The first signal stops the worker after the current step; a second one at once."""
        if self.stopping:
            raise Shutdown(signal.Signals(signum).name)
        self.stopping = True

    def _should_stop(self, recorder: RunRecorder) -> bool:
        if self.stopping:
            raise StopTraining
        return recorder.cancel_requested or recorder.run.id in self.heartbeat.cancelled

    def run_one(self) -> RunRecord | None:
        """Claim and train the next run (with the rest of its stack); returns it as it ended (a stack's
        first run), None when the queue is empty."""
        runs = self.run_next()
        return runs[0] if runs else None

    def run_next(self) -> list[RunRecord]:
        """Claim and train the next run, or the queued runs of its stack together; returns them as they
        ended, in order (empty when the queue is)."""
        runs = self.store.claim_next_group(self.name)
        if len(runs) == 1:
            self._train_one(runs[0])
        elif runs:
            self._train_stack(runs)
        return [self.store.get_run(run.id) for run in runs]

    def _train_one(self, run: RunRecord) -> None:
        log.info("run %s: claimed", run.id)
        self.heartbeat.run_ids = (run.id,)
        recorder = RunRecorder(self.store, run, worker=self.name)
        try:
            plan = recorder.start()
            result = train_claimed(
                run.spec,
                data_dirs=self.data_dirs,
                sink=recorder.write,
                plan=plan,
                should_stop=lambda: self._should_stop(recorder),
                dataset=self.datasets.get(run.spec),
            )
            log.info("run %s: %s", run.id, recorder.finished(result).value)
        except (StopTraining, Shutdown):
            self.stopping = True
            if self._write_end(partial(recorder.requeue, "worker stopping"), f"run {run.id}"):
                log.info("run %s: put back in the queue (worker stopping)", run.id)
        except Exception as exc:  # any failure is recorded on the run, the worker goes on
            log.error("run %s failed:\n%s", run.id, traceback.format_exc())
            self._write_end(partial(recorder.failed, failure_reason(exc)), f"run {run.id}")
        finally:
            self.heartbeat.run_ids = ()
            self.heartbeat.cancelled.discard(run.id)

    def _train_stack(self, runs: Sequence[RunRecord]) -> None:
        """The runs of one stack, trained together: each ends on its own recorder; a worker stopping
        requeues them all, any error fails them all."""
        ids = [run.id for run in runs]
        log.info("runs %s: claimed as one stack", ", ".join(ids))
        self.heartbeat.run_ids = tuple(ids)
        recorders = [RunRecorder(self.store, run, worker=self.name) for run in runs]
        try:
            plans = start_stack(recorders)
            results = train_claimed_stack(
                [run.spec for run in runs],
                data_dirs=self.data_dirs,
                plans=plans,
                sinks=[r.write for r in recorders],
                should_stops=[partial(self._should_stop, r) for r in recorders],
                dataset=self.datasets.get(runs[0].spec),
            )
            for recorder, result in zip(recorders, results, strict=True):
                log.info("run %s: %s", recorder.run.id, recorder.finished(result).value)
        except (StopTraining, Shutdown):
            self.stopping = True
            for recorder in recorders:
                self._write_end(partial(recorder.requeue, "worker stopping"), f"run {recorder.run.id}")
            log.info("runs %s: put back in the queue (worker stopping)", ", ".join(ids))
        except Exception as exc:  # the whole stack failed: recorded on each of its runs, the worker goes on
            log.error("runs %s failed:\n%s", ", ".join(ids), traceback.format_exc())
            for recorder in recorders:
                self._write_end(partial(recorder.failed, failure_reason(exc)), f"run {recorder.run.id}")
        finally:
            self.heartbeat.run_ids = ()
            self.heartbeat.cancelled.difference_update(ids)

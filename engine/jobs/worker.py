"""The local worker loop: claim a queued run, train it, stream metrics to the store in batches, and
end it finished, failed (with the error) or cancelled (with its metrics).

A heartbeat thread tells the store every `DPLAB_HEARTBEAT_S` that the worker and its run are alive,
and picks up cancel requests, so a cancel stops the run at the next step even when no metrics are
due. Any worker also reaps runs whose heartbeat went stale (their worker was killed, ran out of
memory or lost its machine). SIGTERM/SIGINT put the run in hand back in the queue; a second signal
stops at once. A worker started by a pool (`parent_pid`) whose pool dies finishes its run and exits.
"""

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from cache import RunRecord, Store
from engine.jobs import settings
from engine.jobs.recording import RunRecorder
from engine.jobs.run_training import StopTraining, train_claimed
from engine.training import pick_device

log = logging.getLogger("dplab.worker")


class Shutdown(Exception):
    """A second SIGTERM/SIGINT: stop now."""


class Heartbeat:
    """A daemon thread beating for `worker` and its current run every `every_s` seconds."""

    def __init__(self, store: Store, worker: str, *, every_s: float):
        self.store, self.worker, self.every_s = store, worker, every_s
        self.run_id: str | None = None
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
        run_id = self.run_id
        self.cancelled |= self.store.heartbeat(self.worker, [run_id] if run_id else [])

    def _beat(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.beat()
            except Exception:  # a missed beat is not fatal; the stale timeout is several beats long
                log.exception("heartbeat failed")


class Worker:
    def __init__(self, store: Store, *, data_dirs: Sequence[Path] | None = None, name: str | None = None,
                 parent_pid: int | None = None):  # fmt: skip
        self.store = store
        self.data_dirs = list(data_dirs) if data_dirs is not None else settings.default_data_dirs()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.parent_pid = parent_pid
        self.stopping = False
        self.heartbeat = Heartbeat(store, self.name, every_s=settings.heartbeat_s())
        store.register_worker(self.name, backend="local", host=socket.gethostname(), pid=os.getpid(),
                              device=str(pick_device()))  # fmt: skip

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
                    if time.monotonic() - last_reap > settings.stale_after_s() / 4:
                        self.reap_stale_runs()
                        last_reap = time.monotonic()
                    if self.run_one() is None:
                        if exit_when_idle:
                            reason = "queue empty"
                            break
                        time.sleep(poll_s)
                    else:
                        processed += 1
        except Shutdown:
            log.info("stopped")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.store.worker_stopped(self.name, reason=reason)
        return processed

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
        run = self.store.claim_next(self.name)
        if run is None:
            return None
        log.info("run %s: claimed", run.id)
        self.heartbeat.run_id = run.id
        recorder = RunRecorder(self.store, run, worker=self.name)
        try:
            plan = recorder.start()
            result = train_claimed(run.spec, data_dirs=self.data_dirs, sink=recorder.write, plan=plan,
                                   should_stop=lambda: self._should_stop(recorder))  # fmt: skip
            log.info("run %s: %s", run.id, recorder.finished(result).value)
        except (StopTraining, Shutdown):
            recorder.requeue("worker stopping")
            log.info("run %s: put back in the queue (worker stopping)", run.id)
            self.stopping = True
        except Exception as exc:  # any failure is recorded on the run, the worker goes on
            recorder.failed(f"{type(exc).__name__}: {exc}")
            log.error("run %s failed:\n%s", run.id, traceback.format_exc())
        finally:
            self.heartbeat.run_id = None
            self.heartbeat.cancelled.discard(run.id)
        return self.store.get_run(run.id)

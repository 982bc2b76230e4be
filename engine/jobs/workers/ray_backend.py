"""The Ray backend: queued runs train as Ray tasks on an existing Ray cluster; the store stays with
the submitting side.

`RayDispatcher` runs where the SQLite store is, and only it opens the store. It registers as a
worker (backend "ray"), claims queued runs while fewer than `max_in_flight` tasks are in flight,
records each plan (`RunRecorder.start`, which runs the background accountants here) and submits
`train_task` with `num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=0`. A queued run of a
stack is claimed with the other queued runs of its stack, as the local worker claims them, and they
train as one vectorized model in one task (`train_stack_task`, one task's resources), each recorded
as its own run. GPUs are asked for by fraction: on a cluster with a "GPU" resource a task takes
`DEFAULT_GPU_FRACTION` (0.25) of one unless told otherwise, so four small runs share a GPU; on a
CPU-only cluster, none. Ray sets a task's OMP_NUM_THREADS (torch's threads) from its CPUs. The nodes
must be able to import this project (same image, or a `runtime_env`), and `data_dirs` are paths as
the nodes see them.

The tasks and the relay between them and the dispatcher are in `ray_tasks`; the dispatcher drains the
relay every poll into `RunRecorder.write`. This module imports only the training side at module level
(the store inside the dispatcher's methods), so a Ray worker never loads `cache` or sqlite3.

A cancel request sets the run's flag in the relay; the task polls it and stops the run at its next
step: CANCELLED with its metrics (a stack member leaves the stack, the others go on). A task whose
runs are all cancelled and that is still running `cancel_grace_s` later is force-cancelled:
CANCELLED, keeping its metrics. A Python error in a task fails its runs with the original type and
message; a Ray system failure (the worker process or its node died, out of memory, the result lost)
is a lost worker: "worker lost: ...", or back in the queue once if the spec allows. The dispatcher
heartbeats for its runs every `DPLAB_HEARTBEAT_S`; if it is killed they go stale and any worker
reaps them. SIGTERM/SIGINT (or `stop()`) put the runs in flight back in the queue and cancel their
tasks; a second signal stops at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray import exceptions as rex
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from engine.jobs.workers.ray_tasks import Relay, train_stack_task, train_task
from engine.jobs.workers.worker import Shutdown

if TYPE_CHECKING:
    from cache import RunRecord, Store
    from engine.jobs.recording import RunRecorder

log = logging.getLogger("dplab.ray")
DEFAULT_GPU_FRACTION = 0.25
CANCEL_GRACE_S = 10.0  # then the task is force-cancelled
# the worker process or node running the task is gone: "worker lost" (ray 2.60 raises WorkerCrashedError for a
# killed worker process, NodeDiedError / ObjectLostError for a lost node, OutOfMemoryError for its memory monitor)
LOST = (
    rex.WorkerCrashedError,
    rex.NodeDiedError,
    rex.OutOfMemoryError,
    rex.ObjectLostError,
    rex.RayActorError,
    rex.LocalRayletDiedError,
    rex.OutOfDiskError,
)


@dataclass
class InFlight:
    run: RunRecord
    recorder: RunRecorder
    ref: ray.ObjectRef
    cancel_at: float | None = None  # when the cancel request was seen
    forced: bool = False  # the task was force-cancelled
    position: int | None = None  # the run's place in its stack's task (whose result is a list), if stacked


def connect(address: str | None = None) -> None:
    """Join the cluster at `address` (else `RAY_ADDRESS`, else a running local one), unless connected."""
    if not ray.is_initialized():
        ray.init(address=address or "auto", ignore_reinit_error=True)


class RayDispatcher:
    """Dispatches the store's queued runs to Ray. `max_in_flight` defaults to what the cluster fits
    (its CPUs / `cpus_per_run`, and its GPUs / `gpus_per_run`); `cancel_grace_s=0` kills a cancelled
    run's task at once instead of asking it to stop."""

    def __init__(
        self,
        store: Store,
        *,
        address: str | None = None,
        max_in_flight: int | None = None,
        gpus_per_run: float | None = None,
        cpus_per_run: float = 1.0,
        data_dirs: Sequence[Path] | None = None,
        name: str | None = None,
        cancel_grace_s: float = CANCEL_GRACE_S,
    ):
        from engine.jobs import settings

        connect(address)
        resources = ray.cluster_resources()
        cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
        self.store, self.cpus_per_run, self.cancel_grace_s = store, cpus_per_run, cancel_grace_s
        self.gpus_per_run = gpus_per_run if gpus_per_run is not None else (DEFAULT_GPU_FRACTION if gpus else 0.0)
        fits = [cpus / cpus_per_run] + ([gpus / self.gpus_per_run] if self.gpus_per_run else [])
        self.max_in_flight = max_in_flight or max(1, int(min(fits)))
        self.data_dirs = [str(d) for d in (settings.default_data_dirs() if data_dirs is None else data_dirs)]
        self.name = name or f"ray@{socket.gethostname()}:{os.getpid()}"
        self.in_flight: dict[str, InFlight] = {}
        self.relay: Any = None  # the Relay actor, while `run` runs
        self.stopping, self.processed, self.last_beat = False, 0, float("-inf")
        device = f"ray: {cpus:g} CPU, {gpus:g} GPU; {cpus_per_run:g} CPU + {self.gpus_per_run:g} GPU a run"
        store.register_worker(self.name, backend="ray", host=socket.gethostname(), pid=os.getpid(), device=device)

    def stop(self) -> None:
        """Stop after the current poll (callable from any thread): runs in flight go back to the queue."""
        self.stopping = True

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.stopping:
            raise Shutdown(signal.Signals(signum).name)
        self.stopping = True

    def run(self, *, poll_s: float = 0.5, exit_when_idle: bool = False) -> int:
        """Dispatch until stopped (or until nothing is queued or in flight, with `exit_when_idle`).
        Returns the number of runs ended."""
        from engine.jobs import settings

        main = threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
        self.relay = Relay.options(scheduling_strategy=here).remote()
        start, reason, last_reap = self.processed, "stopped", float("-inf")
        try:
            while not self.stopping:
                if time.monotonic() - last_reap > settings.stale_after_s() / 4:
                    for lost in self.store.fail_stale(older_than_s=settings.stale_after_s()):
                        log.warning("run %s: worker lost, %s", lost.run_id, "requeued" if lost.requeued else "failed")
                    last_reap = time.monotonic()
                self._claim()
                if self.in_flight:
                    self._poll(poll_s)
                elif exit_when_idle:
                    reason = "queue empty"
                    break
                else:
                    self._beat()
                    time.sleep(poll_s)
        except Shutdown:
            log.info("stopped")
        except BaseException as exc:
            reason = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._abandon("dispatcher stopping")
            self.store.worker_stopped(self.name, reason=reason)
        return self.processed - start

    def _beat(self) -> None:
        """Every DPLAB_HEARTBEAT_S: tell the store the dispatcher and its runs are alive, pick up cancels."""
        from engine.jobs import settings

        if time.monotonic() - self.last_beat >= settings.heartbeat_s():
            for run_id in self.store.heartbeat(self.name, list(self.in_flight)):
                self._cancel(self.in_flight[run_id])
            self.last_beat = time.monotonic()

    def tasks(self) -> int:
        return len({id(flight.ref) for flight in self.in_flight.values()})

    def _claim(self) -> None:
        from engine.jobs.recording import RunRecorder, start_stack

        while not self.stopping and self.tasks() < self.max_in_flight:
            self._beat()  # planning may take seconds a run: the runs already in flight must not go stale
            runs = self.store.claim_next_group(self.name)
            if not runs:
                return
            recorders = [RunRecorder(self.store, run, worker=self.name) for run in runs]
            try:
                plans = [recorders[0].start()] if len(runs) == 1 else start_stack(recorders)
            except Exception as exc:  # a stored spec that no longer plans: nothing to send to the cluster
                for recorder in recorders:
                    recorder.failed(f"{type(exc).__name__}: {exc}")
                self.processed += len(runs)
                continue
            options = {
                "num_cpus": self.cpus_per_run,
                "num_gpus": self.gpus_per_run,
                "max_retries": 0,
                "name": f"dplab-run-{runs[0].id}",
            }
            ids = [run.id for run in runs]
            if len(runs) == 1:
                ref = train_task.options(**options).remote(ids[0], runs[0].spec, plans[0], self.data_dirs, self.relay)
            else:
                specs = [run.spec for run in runs]
                ref = train_stack_task.options(**options).remote(ids, specs, plans, self.data_dirs, self.relay)
            for k, (run, recorder) in enumerate(zip(runs, recorders, strict=True)):
                position = k if len(runs) > 1 else None
                self.in_flight[run.id] = InFlight(run=run, recorder=recorder, ref=ref, position=position)
            log.info("runs %s: submitted to Ray%s", ", ".join(ids), " as one stack" if len(runs) > 1 else "")

    def _poll(self, timeout_s: float) -> None:
        refs = list({id(flight.ref): flight.ref for flight in self.in_flight.values()}.values())
        ray.wait(refs, num_returns=1, timeout=timeout_s)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for run_id, rows in ray.get(self.relay.drain.remote()).items():  # after `ready`: their rows are all in
            flight = self.in_flight.get(run_id)
            if flight is not None and flight.recorder.write(rows):
                self._cancel(flight)
        self._beat()
        done = set(ready)
        for flight in [f for f in self.in_flight.values() if f.ref in done]:
            self._complete(flight)
        now = time.monotonic()
        for flight in self.in_flight.values():
            if flight.cancel_at is not None and not flight.forced and now - flight.cancel_at >= self.cancel_grace_s:
                task = [f for f in self.in_flight.values() if f.ref is flight.ref]
                if all(f.cancel_at is not None for f in task):  # a stack's task goes on for its other runs
                    log.warning("run %s: cancelled, and its task has not stopped: killing it", flight.run.id)
                    ray.cancel(flight.ref, force=True)
                    for f in task:
                        f.forced = True

    def _cancel(self, flight: InFlight) -> None:
        if flight.cancel_at is None:
            flight.cancel_at = time.monotonic()
            if self.cancel_grace_s > 0 or flight.position is not None:  # a stack is killed only as a whole
                self.relay.cancel.remote(flight.run.id)

    def _complete(self, flight: InFlight) -> None:
        run_id, recorder = flight.run.id, flight.recorder
        del self.in_flight[run_id]
        self.processed += 1
        info = ray.get(self.relay.info.remote(run_id))
        self.relay.forget.remote(run_id)
        try:
            result = ray.get(flight.ref)
            if flight.position is not None:
                result = result[flight.position]
        except Exception as exc:
            cause = exc.cause if isinstance(exc, rex.RayTaskError) and exc.cause is not None else exc
            if flight.cancel_at is not None and isinstance(cause, (rex.TaskCancelledError, *LOST)):
                self._cancelled_without_result(flight)
            elif isinstance(cause, LOST):
                self._lost(flight, cause, info)
            else:
                recorder.failed(f"{type(cause).__name__}: {cause}")
                log.error("run %s failed on %s: %s: %s", run_id, info.get("host"), type(cause).__name__, cause)
            return
        status = recorder.finished(result)
        log.info("run %s: %s on %s (pid %s)", run_id, status.value, info.get("host"), info.get("pid"))
        if info.get("store_modules"):
            log.warning("run %s: its Ray worker loaded %s", run_id, info["store_modules"])

    def _cancelled_without_result(self, flight: InFlight) -> None:
        flight.recorder.cancelled_without_result()
        log.info("run %s: cancelled (its task was killed)", flight.run.id)

    def _lost(self, flight: InFlight, exc: BaseException, info: dict[str, Any]) -> None:
        from cache import WORKER_LOST

        first_line = (str(exc).strip().splitlines() or [""])[0]
        where = f"Ray worker {info.get('pid', '?')} on {info.get('host', '?')}"
        reason = f"{WORKER_LOST}: {where} ({type(exc).__name__}: {first_line})"
        flight.recorder.lost(reason)
        log.warning("run %s: %s", flight.run.id, reason)

    def _abandon(self, reason: str) -> None:
        """Stopping: every run in flight back in the queue, its task cancelled, the relay gone."""
        flights, self.in_flight = list(self.in_flight.values()), {}
        for flight in flights:
            flight.recorder.requeue(reason)
            log.info("run %s: put back in the queue (%s)", flight.run.id, reason)
        try:
            for ref in {id(flight.ref): flight.ref for flight in flights}.values():
                ray.cancel(ref, force=True)
            ray.kill(self.relay)
        except Exception:  # Ray itself is gone: nothing left to stop
            log.exception("could not cancel the Ray tasks")
        self.relay = None

"""A pool of N local worker processes (`python -m engine worker --workers N`), supervised.

Each worker is its own process (its own CUDA device when there are GPUs: worker i sees GPU i mod G)
claiming runs from the store. When a worker dies (kill -9, the kernel's out-of-memory killer, a
crash) the pool marks its run "worker lost" at once (or requeues it once, if its spec asked for it)
and starts a replacement, backing off if workers keep dying young. SIGTERM/SIGINT are passed on:
each worker puts its run back in the queue and exits. If the pool itself is killed, its workers
finish the run in hand and exit (nothing is lost); other workers reap any stale heartbeats.
"""

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from cache import Store, StoreUnusable
from engine.jobs import settings

log = logging.getLogger("dplab.pool")
POLL_S = 0.2
YOUNG_S = 10.0  # a worker dying younger than this doubles the restart delay
MAX_RESTART_DELAY_S = 30.0
STOP_GRACE_S = 60.0


@dataclass
class Child:
    slot: int
    process: subprocess.Popen
    started: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return worker_name(self.process.pid)


def worker_name(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}"


def exit_reason(pid: int, returncode: int) -> str:
    if returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (kill -9 or out of memory)" if sig == "SIGKILL" else ""
        return f"worker lost: process {pid} killed by {sig}{hint}"
    return f"worker lost: process {pid} exited with status {returncode}"


class WorkerPool:
    def __init__(self, store: Store, *, workers: int, gpus: int | None = None, poll_s: float = 0.5):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.store, self.workers, self.poll_s = store, workers, poll_s
        self.gpus = settings.gpu_count() if gpus is None else gpus
        self.children: dict[int, Child] = {}
        self.stopping = False
        self.restart_delay = 0.0

    def child_env(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(slot % self.gpus)
        elif "OMP_NUM_THREADS" not in env:  # share the CPU cores between the workers
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.workers))
        return env

    def spawn(self, slot: int) -> Child:
        command = [
            sys.executable,
            "-m",
            "engine",
            "worker",
            "--pool-child",
            str(os.getpid()),
            "--poll",
            str(self.poll_s),
        ]
        child = Child(slot=slot, process=subprocess.Popen(command, env=self.child_env(slot)))
        self.children[slot] = child
        log.info("worker %d started as %s", slot, child.name)
        return child

    def run(self) -> int:
        """Supervise until SIGTERM/SIGINT; returns the number of workers that were lost."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        lost = 0
        try:
            for slot in range(self.workers):
                self.spawn(slot)
            while not self.stopping:
                time.sleep(POLL_S)
                for slot, child in list(self.children.items()):
                    code = child.process.poll()
                    if code is None or self.stopping:
                        continue
                    lost += code != 0
                    self.handle_exit(child, code)
                    self.respawn(slot, young=time.monotonic() - child.started < YOUNG_S)
        finally:
            self.stop_children()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return lost

    def handle_exit(self, child: Child, code: int) -> None:
        reason = exit_reason(child.process.pid, code)
        try:
            lost = self.store.fail_worker_runs(child.name, reason=reason)
        except StoreUnusable as exc:  # a full disk, say: the stale-heartbeat reaper writes its runs off later
            log.error("worker %s exited: %s; its runs not written off yet: %s", child.name, reason, exc)
            return
        for run in lost:
            log.warning("run %s: %s; %s", run.run_id, reason, "requeued" if run.requeued else "marked failed")
        log.warning("worker %d (%s) exited: %s", child.slot, child.name, reason)

    def respawn(self, slot: int, *, young: bool) -> None:
        self.restart_delay = min(max(1.0, 2 * self.restart_delay), MAX_RESTART_DELAY_S) if young else 0.0
        deadline = time.monotonic() + self.restart_delay
        while time.monotonic() < deadline and not self.stopping:
            time.sleep(POLL_S)
        if not self.stopping:
            self.spawn(slot)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def stop_children(self) -> None:
        """SIGTERM to every worker (each requeues its run), then wait; SIGKILL after STOP_GRACE_S."""
        for child in self.children.values():
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children.values():
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
                self.handle_exit(child, child.process.returncode)

"""What the Ray backend runs on the cluster: `train_task` (one run), `train_stack_task` (the runs of one stack,
trained together as one vectorized model, as the local worker trains them: `train_claimed_stack`) and the
`Relay` actor between them and the dispatcher (`ray_backend`).

A task gets the specs, the plans and a handle on the relay, never the store path. It pushes metric batches to
the relay synchronously (all its rows are there before its result is) and polls the relay for cancel flags at
most every `CANCEL_POLL_S`: a cancelled run stops at its next step (a stack member leaves the stack, the others
go on). This module imports only the training side, so a Ray worker never loads `cache` or sqlite3.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from engine.jobs.run_training import MetricRows, train_claimed, train_claimed_stack

if TYPE_CHECKING:
    from engine.training import TrainingPlan

CANCEL_POLL_S = 0.2  # how often a task asks the relay whether its run was cancelled
STORE_MODULES = ("cache", "cache.store", "sqlite3")  # what a Ray worker must never load


@ray.remote(num_cpus=0)
class Relay:
    """Carries metric batches from the tasks to the dispatcher, cancel flags the other way, and
    where each task runs (`report`/`info`: host, pid, node, and the store modules it loaded)."""

    def __init__(self) -> None:
        self.rows: dict[str, MetricRows] = {}
        self.cancelled_runs: set[str] = set()
        self.infos: dict[str, dict[str, Any]] = {}

    def push(self, run_id: str, rows: MetricRows) -> None:
        self.rows.setdefault(run_id, []).extend(rows)

    def drain(self) -> dict[str, MetricRows]:
        rows, self.rows = self.rows, {}
        return rows

    def cancel(self, run_id: str) -> None:
        self.cancelled_runs.add(run_id)

    def cancelled(self, run_id: str) -> bool:
        return run_id in self.cancelled_runs

    def report(self, run_id: str, info: dict[str, Any]) -> None:
        self.infos.setdefault(run_id, {}).update(info)

    def info(self, run_id: str) -> dict[str, Any]:
        return self.infos.get(run_id, {})

    def forget(self, run_id: str) -> None:
        self.rows.pop(run_id, None)
        self.cancelled_runs.discard(run_id)
        self.infos.pop(run_id, None)


class RelayedRun:
    """One run's side of the relay inside a task: its metric sink and its cancel poll."""

    def __init__(self, relay: Any, run_id: str):
        self.relay, self.run_id = relay, run_id
        self.last_poll, self.stop = float("-inf"), False
        where = {"pid": os.getpid(), "host": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
        ray.get(relay.report.remote(run_id, where))

    def sink(self, rows: MetricRows) -> None:
        ray.get(self.relay.push.remote(self.run_id, rows))

    def should_stop(self) -> bool:
        if not self.stop and time.monotonic() - self.last_poll >= CANCEL_POLL_S:
            self.stop, self.last_poll = ray.get(self.relay.cancelled.remote(self.run_id)), time.monotonic()
        return self.stop

    def done(self) -> None:
        loaded = [m for m in STORE_MODULES if m in sys.modules]
        ray.get(self.relay.report.remote(self.run_id, {"store_modules": loaded}))


@ray.remote(max_retries=0)
def train_task(run_id: str, spec: dict[str, Any], plan: TrainingPlan, data_dirs: list[str], relay: Any) -> dict:
    """One run, in a Ray worker: train, stream metrics through `relay`, stop when it says so."""
    run = RelayedRun(relay, run_id)
    result = train_claimed(
        spec, data_dirs=[Path(d) for d in data_dirs], plan=plan, should_stop=run.should_stop, sink=run.sink
    )
    run.done()
    return result


@ray.remote(max_retries=0)
def train_stack_task(
    run_ids: list[str], specs: list[dict[str, Any]], plans: list[TrainingPlan], data_dirs: list[str], relay: Any
) -> list[dict]:
    """The runs of one stack, in one Ray worker, as one vectorized model: each member's metrics go through
    `relay` under its own run id, and a cancelled member leaves the stack at its next step. Results in order."""
    runs = [RelayedRun(relay, run_id) for run_id in run_ids]
    results = train_claimed_stack(
        specs,
        data_dirs=[Path(d) for d in data_dirs],
        plans=plans,
        sinks=[run.sink for run in runs],
        should_stops=[run.should_stop for run in runs],
    )
    for run in runs:
        run.done()
    return results

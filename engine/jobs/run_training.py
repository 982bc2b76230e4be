"""The training side of a claimed run (or of a claimed stack of runs trained together): parse the
stored spec, train, hand per-step metrics out in batches, stop when asked. It never imports the store
(`cache`), so the very same code runs in a local worker and in a Ray task on a host that cannot see
the SQLite file."""

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.training import Dataset, StackMember, StepRecord, TrainingPlan, parse_spec, plan_spec, train, train_stack

FLUSH_EVERY_S = 0.3
MetricRows = list[tuple[int, dict[str, float]]]


class StopTraining(Exception):
    """The worker is stopping (not a cancel): the run goes back to the queue."""


class MetricBatcher:
    """Buffers step records and hands them to `sink` at most every FLUSH_EVERY_S seconds, except the first
    ones: every record up to the first training step's (step 0 holds the evaluation before training) goes out
    at once, as it is the dashboard's first point."""

    def __init__(self, sink: Callable[[MetricRows], None], *, every_s: float = FLUSH_EVERY_S):
        self.sink, self.every_s = sink, every_s
        self.pending: MetricRows = []
        self.last_flush = -float("inf")
        self.trained = False  # whether a training step's record went out

    def __call__(self, record: StepRecord) -> None:
        self.pending.append((record.step, record.metrics()))
        if not self.trained or time.monotonic() - self.last_flush >= self.every_s:
            self.trained = self.trained or record.step > 0
            self.flush()

    def flush(self) -> None:
        if self.pending:
            rows, self.pending = self.pending, []
            self.sink(rows)
        self.last_flush = time.monotonic()


class LeavingMember:
    """A stack member's metric batcher and stop request: a member that stops hands out its last rows at once
    (the stack trains on, and its other rows would wait for the whole stack to end)."""

    def __init__(self, batcher: MetricBatcher, should_stop: Callable[[], bool]):
        self.batcher, self.stop_asked, self.stopping = batcher, should_stop, False

    def should_stop(self) -> bool:
        self.stopping = self.stopping or self.stop_asked()
        return self.stopping

    def on_step(self, record: StepRecord) -> None:
        self.batcher(record)
        if self.stopping:
            self.batcher.flush()


def train_claimed(
    spec: dict[str, Any],
    *,
    data_dirs: Sequence[Path],
    sink: Callable[[MetricRows], None],
    should_stop: Callable[[], bool],
    on_step: Callable[[StepRecord], None] | None = None,
    plan: TrainingPlan | None = None,
    dataset: Dataset | None = None,
) -> dict[str, Any]:
    """Train a stored (canonical) spec; per-step metrics go to `sink` in batches. Returns the
    result as JSON-ready data; `stopped_early` is set when `should_stop` ended it. `plan` and `dataset`
    save planning and loading again when the caller has just done them."""
    parsed = parse_spec(spec)
    batcher = MetricBatcher(sink)

    def step(record: StepRecord) -> None:
        batcher(record)
        if on_step is not None:
            on_step(record)

    result = train(
        parsed,
        plan=plan or plan_spec(parsed),
        data_dirs=list(data_dirs),
        on_step=step,
        should_stop=should_stop,
        dataset=dataset,
    )
    batcher.flush()
    return result.to_dict()


def train_claimed_stack(
    specs: Sequence[dict[str, Any]],
    *,
    data_dirs: Sequence[Path],
    sinks: Sequence[Callable[[MetricRows], None]],
    should_stops: Sequence[Callable[[], bool]],
    plans: Sequence[TrainingPlan],
    dataset: Dataset | None = None,
) -> list[dict[str, Any]]:
    """Train stored (canonical) specs of one stack together (`train_stack`), with the plans the caller
    made. Member i's per-step metrics go to `sinks[i]` in batches; `should_stops[i]` ends member i
    alone (one that raises, like StopTraining, stops the whole stack). Returns the members' results
    as JSON-ready data, in order. `dataset`: the members' dataset, when the caller has it loaded."""
    members = [StackMember(spec=parse_spec(spec), plan=plan) for spec, plan in zip(specs, plans, strict=True)]
    leaving = [LeavingMember(MetricBatcher(sink), stop) for sink, stop in zip(sinks, should_stops, strict=True)]
    results = train_stack(
        members,
        data_dirs=list(data_dirs),
        on_step=[m.on_step for m in leaving],
        should_stop=[m.should_stop for m in leaving],
        dataset=dataset,
    )
    batchers = [m.batcher for m in leaving]
    for batcher in batchers:
        batcher.flush()
    return [result.to_dict() for result in results]

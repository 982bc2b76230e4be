"""What a run's first point waits for: the batcher sends every record up to the first training step at once, the
background accountants begin only once that point is stored, and the dashboard's wait after Train ends as soon
as the step is stored (or the run ends, or no worker claims it)."""

import threading

import pytest

from cache import RunStatus
from engine.jobs import submission
from engine.jobs.recording import RunRecorder
from engine.jobs.run_training import MetricBatcher
from engine.jobs.submission import await_first_step, submit
from engine.jobs.workers.worker import Worker
from engine.training import StepRecord, parse_spec
from tests.helpers import fast_spec


def record(step: int) -> StepRecord:
    return StepRecord(step=step, epoch=0.0, epsilon=0.1 * step, train_loss=1.0)


def test_records_up_to_the_first_training_step_go_out_at_once_then_in_batches():
    sent = []
    batcher = MetricBatcher(lambda rows: sent.append([step for step, _ in rows]), every_s=3600)
    for step in range(5):
        batcher(record(step))
    assert sent == [[0], [1]]  # the evaluation before training, then the first step: each at once
    batcher.flush()
    assert sent == [[0], [1], [2, 3, 4]]


def test_a_run_with_a_step_zero_evaluation_only_waits_for_its_first_step():
    sent = []
    batcher = MetricBatcher(lambda rows: sent.append([step for step, _ in rows]), every_s=3600)
    batcher(record(0))
    batcher(record(0))  # a second step-0 record (an up-front release) is not yet a training step
    batcher(record(1))
    batcher(record(2))
    assert sent == [[0], [0], [1]]


def test_the_accountants_begin_once_the_first_point_is_stored(store):
    submit(store, parse_spec(fast_spec()))
    [run] = store.claim_next_group("w")
    recorder = RunRecorder(store, run, worker="w")
    recorder.start()
    try:
        assert not recorder.accounting.thread.is_alive() and not recorder.accounting.started
        recorder.write([])  # nothing stored: still waiting
        assert not recorder.accounting.started
        recorder.write([(0, {"epsilon": 0.0})])
        assert recorder.accounting.started
        recorder.write([(1, {"epsilon": 0.1})])  # later batches start nothing more
    finally:
        recorder.accounting.close()
    assert not recorder.accounting.thread.is_alive()


def test_closing_before_the_first_point_starts_no_thread(store):
    submit(store, parse_spec(fast_spec()))
    [run] = store.claim_next_group("w")
    recorder = RunRecorder(store, run, worker="w")
    recorder.start()
    recorder.accounting.close()
    recorder.accounting.begin()  # a late first point after the run ended
    assert not recorder.accounting.started and not recorder.accounting.thread.is_alive()


def test_the_wait_after_train_ends_with_the_first_stored_step(store):
    run_id = submit(store, parse_spec(fast_spec(epochs=200))).run_id
    worker = Worker(store, data_dirs=[])
    thread = threading.Thread(target=worker.run_one)
    thread.start()
    try:
        await_first_step(store, run_id, timeout_s=120, unclaimed_s=120)
        run = store.get_run(run_id)
        assert run.progress_step >= 1 and run.status is RunStatus.RUNNING  # 200 epochs: far from its end
    finally:
        store.request_cancel(run_id)
        thread.join(timeout=120)


class FakeClock:
    """`time` for `engine.jobs.submission`: sleeping advances it, so the waits are checked without a wall clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(submission, "time", fake)
    return fake


def test_the_wait_gives_up_on_a_run_no_worker_claims(store, clock):
    run_id = submit(store, parse_spec(fast_spec())).run_id
    await_first_step(store, run_id, timeout_s=60, unclaimed_s=0.2, poll_s=0.03)
    assert 0.2 < clock.now <= 0.2 + 0.03 + 1e-9  # one poll after `unclaimed_s`, long before `timeout_s`
    assert store.get_run(run_id).status is RunStatus.QUEUED


@pytest.mark.parametrize("end", ["cancel", "timeout"])
def test_the_wait_ends_with_the_run_or_at_its_timeout(store, clock, end):
    run_id = submit(store, parse_spec(fast_spec())).run_id
    store.claim_next_group("w")  # claimed by a worker that never trains it
    if end == "cancel":
        store.request_cancel(run_id)
        store.finish(run_id, status=RunStatus.CANCELLED, result=None, worker="w")
    await_first_step(store, run_id, timeout_s=0.3 if end == "timeout" else 60, unclaimed_s=0.0, poll_s=0.03)
    if end == "cancel":
        assert clock.now == 0.0  # an ended run: no wait at all
    else:
        assert 0.3 <= clock.now < 0.3 + 0.03 + 1e-9  # polled until `timeout_s`, a claimed run never given up on

"""The Ray backend against a real local Ray instance (2 CPUs): a sweep end to end with the same
results as the local worker, separate runs and vectorized stacks, a training side that never loads
the store, cancel (of a run, of one member of a stack), a failing task, a killed Ray worker, SIGTERM.
Tests that kill Ray workers come last: a killed worker's replacement starts cold (it imports torch
again)."""

import os
import shutil
import signal
import tempfile
import threading

import pytest
import ray
import torch

from cache import RunStatus, Store
from engine.jobs.options import JobOptions
from engine.jobs.submission import submit
from engine.jobs.sweep import submit_sweep
from engine.jobs.workers.ray_backend import CANCEL_GRACE_S, RayDispatcher
from engine.jobs.workers.ray_tasks import STORE_MODULES, Relay, train_task
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec, plan_spec
from tests.helpers import fast_spec, wait_for

# separate runs on both sides (the local worker would otherwise train the σ grid as one vectorized stack)
SWEEP = {"base": fast_spec(epochs=2), "grid": {"noise_multiplier": [1.0, 2.0]}, "seeds": [0, 1], "vectorize": False}
STACKED = {"base": fast_spec(epochs=2), "grid": {"noise_multiplier": [1.0, 2.0, 4.0]}}  # one stack of three
NOT_COMPARED = {"seconds", "elapsed_s"}  # wall-clock times


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    short = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must be short
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_AUTH_MODE")}
    os.environ.update(RAY_TMPDIR=short, RAY_AUTH_MODE="disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    shutil.rmtree(short, ignore_errors=True)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def long_spec(**overrides) -> dict:
    spec = fast_spec(epochs=500, noise_multiplier=1.0, **overrides)
    del spec["target_epsilon"]
    return spec


def in_thread(dispatcher: RayDispatcher) -> threading.Thread:
    thread = threading.Thread(target=dispatcher.run, kwargs={"poll_s": 0.1, "exit_when_idle": True}, daemon=True)
    thread.start()
    return thread


def task_pid(dispatcher: RayDispatcher, run_id: str) -> int:
    def pid():
        relay = dispatcher.relay
        return relay is not None and ray.get(relay.info.remote(run_id)).get("pid")

    return wait_for(pid, what=f"the pid of run {run_id}'s task")


def by_step(store: Store, run_id: str) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    for step, name, value in store.metrics(run_id):
        if name not in NOT_COMPARED:
            rows.setdefault(step, {})[name] = value
    return rows


def training_metrics(steps: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """Without the other accountants' curves, computed beside the run on a grid as far as time allows."""
    return {step: {k: v for k, v in row.items() if not k.startswith("epsilon_")} for step, row in steps.items()}


@ray.remote(num_cpus=1)
def task_threads() -> int:
    """The torch threads of a Ray task that asks for one CPU, as `train_task` does (Ray sets its
    OMP_NUM_THREADS from its CPUs)."""
    return torch.get_num_threads()


@pytest.mark.slow
@pytest.mark.parametrize("grid", [SWEEP, STACKED], ids=["separate runs", "one stack"])
def test_a_sweep_on_ray_equals_the_local_workers(store, tmp_path, grid):
    """Bitwise the same under the same thread settings: the local worker trains with as many torch threads
    as a Ray task has (float32 reductions are summed in another order with another thread count, which
    changes the last bits of losses and diagnostics on some CPUs, so equality is only claimed for equal
    settings; the noise draws themselves never depend on the thread count). A stack trains as one
    vectorized model on both sides."""
    sweep = submit_sweep(store, grid)
    dispatcher = RayDispatcher(store, data_dirs=[])
    gpu_fraction = 0.25 if ray.cluster_resources().get("GPU") else 0.0  # 4 runs a GPU, if any
    assert dispatcher.max_in_flight == 2 and dispatcher.gpus_per_run == gpu_fraction  # 2 CPUs
    assert dispatcher.run(poll_s=0.1, exit_when_idle=True) == len(sweep.run_ids)
    stacked = [store.get_run(run_id).result.get("stack") for run_id in sweep.run_ids]
    if grid is STACKED:
        assert [s["members"] for s in stacked] == [3, 3, 3] and [s["position"] for s in stacked] == [0, 1, 2]
    else:
        assert stacked == [None] * 4
    local_store = Store(tmp_path / "local" / "runs.sqlite3")
    local = submit_sweep(local_store, grid)
    threads = torch.get_num_threads()
    torch.set_num_threads(ray.get(task_threads.remote()))
    try:
        Worker(local_store, data_dirs=[]).run_forever(exit_when_idle=True)
    finally:
        torch.set_num_threads(threads)

    for ray_id, local_id in zip(sweep.run_ids, local.run_ids, strict=True):
        on_ray, here = store.get_run(ray_id), local_store.get_run(local_id)
        assert on_ray.status is here.status is RunStatus.FINISHED
        assert on_ray.worker == dispatcher.name and on_ray.spec == here.spec
        assert on_ray.plan == here.plan
        same = {k: v for k, v in on_ray.result.items() if k not in NOT_COMPARED}
        assert same == {k: v for k, v in here.result.items() if k not in NOT_COMPARED}  # bitwise: ε, accuracy, ...
        steps = by_step(store, ray_id)
        assert sorted(steps) == list(range(on_ray.total_steps + 1)) and on_ray.progress_step == on_ray.total_steps
        local_steps = by_step(local_store, local_id)
        assert steps[on_ray.total_steps] == local_steps[here.total_steps]  # every accountant's final ε
        assert training_metrics(steps) == training_metrics(local_steps)  # every step's loss, accuracy, ε
    worker = next(w for w in store.list_workers(include_stopped=True) if w.name == dispatcher.name)
    assert worker.backend == "ray" and worker.stop_reason == "queue empty"
    assert store.integrity_ok()


def test_the_training_side_never_loads_the_store():
    spec = parse_spec(fast_spec(epochs=1))
    relay = Relay.remote()
    result = ray.get(train_task.remote("probe", spec.to_dict(), plan_spec(spec), [], relay))
    info = ray.get(relay.info.remote("probe"))
    assert result["steps"] > 0 and info["pid"] != os.getpid()
    assert info["store_modules"] == [], f"a Ray worker loaded {info['store_modules']} (of {STORE_MODULES})"
    assert ray.get(relay.drain.remote())["probe"][-1][0] == result["steps"]  # the metrics came through the relay
    ray.kill(relay)


def test_cancel_stops_a_running_ray_task(store):
    run_id = submit(store, parse_spec(long_spec())).run_id
    dispatcher = RayDispatcher(store, data_dirs=[])
    thread = in_thread(dispatcher)
    wait_for(lambda: store.get_run(run_id).progress_step > 0, what="training to start")
    store.request_cancel(run_id)
    run = wait_for(lambda: (r := store.get_run(run_id)).status is not RunStatus.RUNNING and r, timeout=120)
    assert run.status is RunStatus.CANCELLED and run.result["stopped_early"]
    assert 0 < run.result["steps"] < run.total_steps
    assert sorted(by_step(store, run_id)) == list(range(run.result["steps"] + 1)), "its metrics are kept"
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_cancelled_stack_member_leaves_the_stack_and_the_others_go_on(store):
    """One task trains the stack; a cancel stops its member at the next step, and the task is not killed for it
    (no grace: a task whose runs are all cancelled would be, at once) while another member trains."""
    sweep = submit_sweep(store, {"base": long_spec(seed=11), "grid": {"noise_multiplier": [1.0, 2.0]}})
    first, second = sweep.run_ids
    dispatcher = RayDispatcher(store, data_dirs=[], cancel_grace_s=0)
    thread = in_thread(dispatcher)
    wait_for(lambda: store.get_run(first).progress_step > 0, what="the stack to start")
    store.request_cancel(first)

    def ahead(by: int) -> bool:  # the members step together while both are in the stack
        return store.get_run(second).progress_step > store.get_run(first).progress_step + by

    wait_for(lambda: ahead(30), what="the other member to go on alone")
    stopped_at = store.get_run(first).progress_step  # a leaving member's last rows are stored at once
    wait_for(lambda: store.get_run(second).progress_step > stopped_at + 60, what="the other member to go on")
    assert store.get_run(first).progress_step == stopped_at and dispatcher.tasks() == 1
    dispatcher.cancel_grace_s = CANCEL_GRACE_S  # the last member's cancel: the task ends by itself, with results
    store.request_cancel(second)
    thread.join(timeout=60)
    assert not thread.is_alive()
    runs = [store.get_run(run_id) for run_id in (first, second)]
    assert [r.status for r in runs] == [RunStatus.CANCELLED] * 2, [r.error for r in runs]
    assert [r.result["stack"]["members"] for r in runs] == [2, 2]
    assert runs[0].result["steps"] == stopped_at < runs[1].result["steps"] < runs[1].total_steps


def test_a_python_error_in_a_task_fails_the_run_and_the_dispatcher_goes_on(store):
    bad = submit(store, parse_spec(fast_spec(dataset="adult", delta=1e-6))).run_id
    good = submit(store, parse_spec(fast_spec(epochs=1))).run_id
    assert RayDispatcher(store, data_dirs=[], max_in_flight=1).run(poll_s=0.1, exit_when_idle=True) == 2
    failed = store.get_run(bad)
    assert failed.status is RunStatus.FAILED and failed.error.startswith("DatasetError: ") and "adult" in failed.error
    assert store.get_run(good).status is RunStatus.FINISHED


@pytest.mark.slow
def test_a_killed_ray_worker_is_a_lost_worker(store):
    lost = submit(store, parse_spec(long_spec(seed=3)), options=JobOptions(on_worker_lost="requeue")).run_id
    other = submit(store, parse_spec(fast_spec(epochs=2))).run_id
    dispatcher = RayDispatcher(store, data_dirs=[])
    thread = in_thread(dispatcher)
    for attempt in (1, 2):  # requeued once, then failed

        def training(attempt=attempt):
            return (run := store.get_run(lost)).attempts == attempt and run.progress_step > 0

        wait_for(training, what=f"attempt {attempt} to train")
        os.kill(task_pid(dispatcher, lost), signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive()

    run = store.get_run(lost)
    assert run.status is RunStatus.FAILED and run.attempts == 2 and run.error.startswith("worker lost: Ray worker")
    assert "WorkerCrashedError" in run.error and store.metrics(lost), "the metrics of the last attempt are kept"
    requeue = [e.detail for e in store.events(lost) if e.status is RunStatus.QUEUED][-1]
    assert requeue.startswith("worker lost") and requeue.endswith("; requeued")
    assert store.get_run(other).status is RunStatus.FINISHED
    assert store.integrity_ok()


def test_a_task_that_ignores_the_cancel_is_killed_and_the_run_cancelled(store):
    run_id = submit(store, parse_spec(long_spec(seed=7))).run_id
    dispatcher = RayDispatcher(store, data_dirs=[], cancel_grace_s=0)  # no grace: killed at once
    thread = in_thread(dispatcher)
    wait_for(lambda: store.get_run(run_id).progress_step > 0, what="training to start")
    store.request_cancel(run_id)
    thread.join(timeout=30)
    assert not thread.is_alive()
    run = store.get_run(run_id)
    assert run.status is RunStatus.CANCELLED and run.result is None and run.error is None
    steps = by_step(store, run_id)
    assert steps and max(steps) <= run.progress_step, "its metrics are kept, no accountant curve runs past them"


@pytest.mark.slow
def test_sigterm_puts_the_runs_in_flight_back_in_the_queue(store):
    run_id = submit(store, parse_spec(long_spec(seed=5))).run_id
    dispatcher = RayDispatcher(store, data_dirs=[])

    def terminate_once_training():
        try:
            wait_for(lambda: store.get_run(run_id).progress_step > 0, what="training to start")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # caught by the dispatcher, which runs in the main thread

    threading.Thread(target=terminate_once_training, daemon=True).start()
    assert dispatcher.run(poll_s=0.1) == 0
    run = store.get_run(run_id)
    assert run.status is RunStatus.QUEUED and run.progress_step == 0 and store.metrics(run_id) == []
    assert [e.detail for e in store.events(run_id)][-1] == "dispatcher stopping"
    worker = next(w for w in store.list_workers(include_stopped=True) if w.name == dispatcher.name)
    assert worker.stop_reason == "stopped" and dispatcher.relay is None

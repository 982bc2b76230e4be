"""Nothing lost under crashes and concurrency: real worker processes, kill -9, many runs, many readers.

Workers here beat every 0.3 s and are written off after 3 s without a heartbeat (DPLAB_HEARTBEAT_S,
DPLAB_STALE_AFTER_S), so the tests wait seconds, not the default 30 s.
"""

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from cache import RunStatus, Store
from engine.jobs.options import split_job_options
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests.helpers import ROOT, fast_spec, free_port, home_env, stop_process_group, wait_for

STALE_AFTER_S = 3.0
FAST_HEARTBEAT = {"DPLAB_HEARTBEAT_S": "0.3", "DPLAB_STALE_AFTER_S": str(STALE_AFTER_S)}
TERMINAL = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)


def env_for(home: Path, **overrides: str) -> dict[str, str]:
    return home_env(home, **(FAST_HEARTBEAT | {"OMP_NUM_THREADS": "1"} | overrides))


def start(home: Path, *args: str, log: Path | None = None, **env: str) -> subprocess.Popen:
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env_for(home, **env), stdout=out, stderr=out, start_new_session=True
    )


def queue(store: Store, **overrides) -> str:
    spec = {k: v for k, v in fast_spec(**overrides).items() if v is not None}
    training, options = split_job_options(spec)
    return submit(store, parse_spec(training), options=options).run_id


def pid_of(worker: str) -> int:
    return int(worker.rsplit(":", 1)[1])


def running_with_progress(store: Store, run_id: str, steps: int = 3):
    run = store.get_run(run_id)
    return run if run.status is RunStatus.RUNNING and run.progress_step >= steps else None


@pytest.mark.slow
def test_kill_9_of_a_pool_worker_fails_its_run_and_the_queue_goes_on(home, store, tmp_path):
    long = queue(store, epochs=500)
    # Heartbeats go stale only after 10 minutes here, so the run can fail only because the pool saw its worker die
    pool = start(
        home,
        "-m",
        "engine",
        "worker",
        "--workers",
        "2",
        "--poll",
        "0.1",
        log=tmp_path / "pool.log",
        DPLAB_STALE_AFTER_S="600",
    )
    try:
        victim = wait_for(lambda: running_with_progress(store, long), timeout=120, what="the long run to train")
        second = queue(store, epochs=2, seed=7)
        os.kill(pid_of(victim.worker), signal.SIGKILL)
        lost = wait_for(
            lambda: (r := store.get_run(long)).status is RunStatus.FAILED and r,
            timeout=120,
            what="the killed worker's run to fail",
        )
        assert lost.error.startswith("worker lost") and "SIGKILL" in lost.error, lost.error  # the pool's words
        assert store.metrics(long), "the lost run keeps the metrics it had streamed"
        done = wait_for(
            lambda: (r := store.get_run(second)).status in TERMINAL and r, timeout=120, what="the second run"
        )
        assert done.status is RunStatus.FINISHED
        alive = wait_for(lambda: len(store.list_workers()) == 2, timeout=30, what="the pool to replace its worker")
        assert alive
    finally:
        assert stop_process_group(pool) == 0, (tmp_path / "pool.log").read_text()[-3000:]
    assert store.integrity_ok()
    assert store.list_workers() == [], "a stopped pool leaves no worker registered as alive"


@pytest.mark.slow
def test_a_worker_killed_without_a_pool_is_reaped_after_its_heartbeat_goes_stale(home, store, tmp_path):
    lost_id = queue(store, epochs=500)
    lone = start(home, "-m", "engine", "worker", "--once", "--poll", "0.1")
    victim = wait_for(lambda: running_with_progress(store, lost_id), timeout=120, what="the run to train")
    second = queue(store, epochs=2, seed=8)
    lone.send_signal(signal.SIGKILL)
    lone.wait()
    other = start(home, "-m", "engine", "worker", "--workers", "1", "--poll", "0.1", log=tmp_path / "other.log")
    try:
        lost = wait_for(
            lambda: (r := store.get_run(lost_id)).status is RunStatus.FAILED and r,
            timeout=120,
            what="the stale run to be reaped",
        )
        assert lost.error.startswith(f"worker lost: no heartbeat from {victim.worker}")
        assert wait_for(lambda: store.get_run(second).status is RunStatus.FINISHED, timeout=120, what="run two")
    finally:
        stop_process_group(other)
    assert store.integrity_ok()


def rdp_of_steps(plan: dict, steps: int) -> float:
    """dp-accounting's RDP ε of `steps` Poisson DP-SGD steps of a stored plan (no up-front release)."""
    step = dp_event.PoissonSampledDpEvent(plan["sampling_rate"], dp_event.GaussianDpEvent(plan["noise_multiplier"]))
    return RdpAccountant().compose(dp_event.SelfComposedDpEvent(step, steps)).get_epsilon(plan["delta"])


@pytest.mark.slow
def test_a_run_that_asks_for_it_is_requeued_once_after_its_worker_dies(home, store, tmp_path):
    # Long enough (~11,000 steps) that the kill lands mid-run however fast the machine: the progress row is
    # flushed every 0.3 s, and a 30-epoch run once finished between two flushes on a fast core.
    run_id = queue(store, epochs=500, on_worker_lost="requeue")
    pool = start(home, "-m", "engine", "worker", "--workers", "1", "--poll", "0.1", log=tmp_path / "pool.log")
    try:
        victim = wait_for(lambda: running_with_progress(store, run_id), timeout=120, what="the run to train")
        os.kill(pid_of(victim.worker), signal.SIGKILL)
        run = wait_for(lambda: (r := store.get_run(run_id)).status in TERMINAL and r, timeout=180, what="the rerun")
    finally:
        stop_process_group(pool)
    assert run.status is RunStatus.FINISHED and run.attempts == 2
    statuses = [e.status for e in store.events(run_id)]
    assert statuses == [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.FINISHED]
    steps = sorted({step for step, name, _ in store.metrics(run_id) if name == "train_loss"})
    assert steps == list(range(1, run.total_steps + 1)), "the rerun's metrics, complete, none left from the first try"
    # lab mode: the rerun replayed the killed attempt's noise, so the run released its steps once
    [first] = run.plan["earlier_attempts"]
    assert 3 <= first < run.total_steps and run.plan["earlier_noise"] == "replayed"
    assert run.result["epsilons"]["rdp"] == pytest.approx(rdp_of_steps(run.plan, run.total_steps), rel=1e-9)


@pytest.mark.slow
def test_a_release_mode_run_killed_and_requeued_is_charged_both_attempts(home, store, tmp_path):
    """kill -9 of the worker mid-run; the rerun draws fresh noise, so its ε composes the killed attempt's stored
    steps with its own, from the first point of the rerun to its last (dp-accounting, rebuilt from the plan)."""
    run_id = queue(
        store, epochs=500, on_worker_lost="requeue", noise="release", target_epsilon=None, noise_multiplier=1.0
    )
    pool = start(home, "-m", "engine", "worker", "--workers", "1", "--poll", "0.1", log=tmp_path / "pool.log")
    try:
        victim = wait_for(lambda: running_with_progress(store, run_id, steps=30), timeout=120, what="the run")
        os.kill(pid_of(victim.worker), signal.SIGKILL)
        wait_for(
            lambda: store.get_run(run_id).attempts == 2 and running_with_progress(store, run_id, steps=10),
            timeout=180,
            what="the rerun to train",
        )
        store.request_cancel(run_id)
        run = wait_for(lambda: (r := store.get_run(run_id)).status in TERMINAL and r, timeout=120, what="the cancel")
    finally:
        stop_process_group(pool)
    assert run.status is RunStatus.CANCELLED
    [first] = run.plan["earlier_attempts"]
    assert first >= 30 and run.plan["earlier_noise"] == "fresh"
    steps = run.result["steps"]
    assert run.result["epsilons"]["rdp"] == pytest.approx(rdp_of_steps(run.plan, first + steps), rel=1e-9)
    assert run.result["epsilon"] > run.result["restart"]["epsilon_this_attempt"]
    live = {step: value for step, name, value in store.metrics(run_id) if name == "epsilon"}
    assert live[0] == pytest.approx(rdp_of_steps(run.plan, first), rel=1e-9)  # the curve goes on from the kill


@pytest.mark.slow
def test_two_workers_finish_fifty_queued_runs_each_exactly_once(home, store, tmp_path):
    ids = [queue(store, epochs=0.5, seed=seed, noise_multiplier=1.0, target_epsilon=None) for seed in range(50)]
    pool = start(home, "-m", "engine", "worker", "--workers", "2", "--poll", "0.05", log=tmp_path / "pool.log")
    try:
        wait_for(
            lambda: all(r.status in TERMINAL for r in store.list_runs(limit=100)),
            timeout=600,
            what="50 runs",
            every=1.0,
        )
    finally:
        stop_process_group(pool)
    runs = {r.id: r for r in store.list_runs(limit=100)}
    assert sorted(runs) == sorted(ids)
    assert all(r.status is RunStatus.FINISHED for r in runs.values()), {r.id: r.error for r in runs.values()}
    assert len({r.worker for r in runs.values()}) == 2, "both workers took runs"
    for run_id, run in runs.items():
        claims = [e for e in store.events(run_id) if e.status is RunStatus.RUNNING]
        assert len(claims) == 1 and run.attempts == 1, f"{run_id} was claimed {len(claims)} times"
        rows = store.metrics(run_id)
        assert [step for step, _, _ in rows] == sorted(step for step, _, _ in rows), "metrics come back in order"
        epsilon_steps = [step for step, name, _ in rows if name == "epsilon"]
        assert epsilon_steps == list(range(run.total_steps + 1)), f"{run_id}: every step's ε, once"
    assert store.integrity_ok()


def _write_metrics(path: str, run_id: str, seconds: float, errors) -> None:
    try:
        store = Store(path)
        step, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            store.append_metrics(run_id, [(step + i, {"loss": 1.0 / (step + i + 1), "acc": 0.5}) for i in range(20)])
            store.heartbeat("writer", [run_id])
            step += 20
        errors.put(("writer", None, step))
    except Exception as exc:  # reported to the test
        errors.put(("writer", repr(exc), 0))


def _read_everything(path: str, run_ids: list[str], seconds: float, errors) -> None:
    try:
        store = Store(path)
        reads, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            store.list_runs()
            for run_id in run_ids:
                store.get_run(run_id)
                store.metrics(run_id, after_step=max(0, reads * 5 - 100))
                store.events(run_id)
            store.list_workers()
            reads += 1
        errors.put(("reader", None, reads))
    except Exception as exc:
        errors.put(("reader", repr(exc), 0))


@pytest.mark.slow
def test_readers_and_writers_at_once_never_see_database_is_locked(store):
    run_ids = [store.create_run(spec={"n": i}, cache_key=f"k{i}", engine_version="t") for i in range(2)]
    for _ in run_ids:
        store.claim_next("writer")
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    procs = [context.Process(target=_write_metrics, args=(str(store.path), run_id, 6.0, errors)) for run_id in run_ids]
    procs += [context.Process(target=_read_everything, args=(str(store.path), run_ids, 6.0, errors)) for _ in range(3)]
    for proc in procs:
        proc.start()
    reports = [errors.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert [error for _, error, _ in reports if error] == []
    assert all(count > 0 for _, _, count in reports), reports
    written = sum(count for role, _, count in reports if role == "writer")
    assert len(store.metrics(run_ids[0])) + len(store.metrics(run_ids[1])) == 2 * written
    assert store.integrity_ok()


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def dashboard_pid(launcher: subprocess.Popen) -> int | None:
    """The streamlit process started by scripts/run.sh (a child of the launcher's shell)."""
    out = subprocess.run(["pgrep", "-f", "-s", str(launcher.pid), "streamlit run"], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    return pids[0] if pids else None


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="scripts/run.sh runs the project venv")
def test_kill_9_of_the_dashboard_loses_nothing_and_it_comes_back(home, store, tmp_path):
    port = free_port()
    env = {**env_for(home), "DPLAB_PORT": str(port), "DPLAB_WORKERS": "1"}
    long = queue(store, epochs=1000)  # trains until cancelled below, however fast the machine
    short = queue(store, epochs=2, seed=3)
    log = open(tmp_path / "run.log", "wb")  # noqa: SIM115 (closed with the process)
    launcher = subprocess.Popen(
        ["bash", "scripts/run.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_for(lambda: healthy(port), timeout=120, what="the dashboard")
        wait_for(lambda: running_with_progress(store, long), timeout=120, what="the long run to train")
        first = dashboard_pid(launcher)
        os.kill(first, signal.SIGKILL)
        progress = store.get_run(long).progress_step
        wait_for(lambda: store.get_run(long).progress_step > progress + 5, timeout=60, what="training to go on")
        wait_for(
            lambda: (pid := dashboard_pid(launcher)) and pid != first and healthy(port),
            timeout=120,
            what="the dashboard to come back",
        )
        assert store.get_run(long).status is RunStatus.RUNNING, "the long run trained through the dashboard's death"
        store.request_cancel(long)
        wait_for(
            lambda: all(store.get_run(r).status in TERMINAL for r in (long, short)),
            timeout=300,
            what="both runs",
            every=0.5,
        )
    finally:
        launcher.send_signal(signal.SIGTERM)
        try:
            launcher.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever is left of the launcher's session
                os.killpg(launcher.pid, signal.SIGKILL)
    for run_id, status in ((long, RunStatus.CANCELLED), (short, RunStatus.FINISHED)):
        run = store.get_run(run_id)
        assert run.status is status, run.error
        steps = {step for step, name, _ in store.metrics(run_id) if name == "epsilon"}
        assert steps == set(range(run.result["steps"] + 1)), "every step's metrics, none lost"
    assert store.integrity_ok()

    from streamlit.testing.v1 import AppTest  # the restarted dashboard's Runs page lists both, finished

    page = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60).run()
    page.switch_page("views/runs.py").run()
    assert not page.exception
    table = next(d.value for d in page.dataframe if "status" in d.value)
    assert set(table["id"]) == {long, short} and set(table["status"]) == {"finished", "cancelled"}

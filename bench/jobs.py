"""Jobs suite: what the queue costs around training, measured on real worker processes.

- submit: a fresh submission against a cache hit (median of several);
- throughput of tiny digits runs by a pool of 1 worker and of 2 (span from the first claim to the
  last finish, from the store's own timestamps), in `rounds` rounds, the order alternating (1 then 2, 2 then 1,
  …), each on a fresh store; the throughputs are medians over rounds, and their ratio the median of the per-round
  ratios with its spread and `bench.timing`'s self-check (`ratio_summary`);
- a kill -9 of a pool worker: seconds until its run is `failed: worker lost`;
- a kill -9 of a lone worker: seconds until another worker reaps the stale run (the stale timeout
  is set to 3 s here, 30 s by default).
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.timing import ratio_summary, report_unstable
from cache import RunStatus, Store
from engine.jobs.submission import submit
from engine.training import parse_spec

ROOT = Path(__file__).resolve().parents[1]
STALE_AFTER_S = 3.0
TERMINAL = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)


def tiny_spec(seed: int, epochs: float = 0.5) -> dict:
    return {
        "dataset": "digits",
        "model": "logreg",
        "algorithm": "dpsgd",
        "noise_multiplier": 1.0,
        "delta": 1e-5,
        "clip_norm": 1.0,
        "lot_size": 64,
        "epochs": epochs,
        "lr": 2.0,
        "seed": seed,
    }


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DPLAB_HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "DPLAB_HEARTBEAT_S": "0.3",
        "DPLAB_STALE_AFTER_S": str(STALE_AFTER_S),
    }


def _worker(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "worker", "--poll", "0.05", *args],
        cwd=ROOT,
        env=_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait(predicate, timeout: float = 600.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise TimeoutError("benchmark step timed out")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def _submit_latency(store: Store, count: int) -> tuple[float, float]:
    fresh, cached = [], []
    for seed in range(count):
        spec = parse_spec(tiny_spec(1000 + seed))
        started = time.perf_counter()
        run_id = submit(store, spec).run_id
        fresh.append(time.perf_counter() - started)
        store.claim_next("bench")
        store.finish(run_id, status=RunStatus.FINISHED, result={"epsilon": 1.0})
        started = time.perf_counter()
        assert submit(store, spec).cached
        cached.append(time.perf_counter() - started)
    return statistics.median(fresh), statistics.median(cached)


def _throughput(home: Path, workers: int, runs: int, offset: int) -> float:
    store = Store(home / "runs.sqlite3")
    ids = [submit(store, parse_spec(tiny_spec(offset + i))).run_id for i in range(runs)]
    pool = _worker(home, "--workers", str(workers))
    try:
        _wait(lambda: all(store.get_run(i).status in TERMINAL for i in ids))
    finally:
        _stop(pool)
    records = [store.get_run(i) for i in ids]
    assert all(r.status is RunStatus.FINISHED for r in records), [r.error for r in records]
    return runs / (max(r.finished_at for r in records) - min(r.started_at for r in records))


def _running(store: Store, run_id: str):
    run = store.get_run(run_id)
    return run if run.status is RunStatus.RUNNING and run.progress_step >= 3 else None


def _kill_latencies(home: Path) -> tuple[float, float]:
    store = Store(home / "runs.sqlite3")
    pooled = submit(store, parse_spec(tiny_spec(5000, epochs=500))).run_id
    pool = _worker(home, "--workers", "1")
    try:
        victim = _wait(lambda: _running(store, pooled))
        os.kill(int(victim.worker.rsplit(":", 1)[1]), signal.SIGKILL)
        killed = time.monotonic()
        _wait(lambda: store.get_run(pooled).status is RunStatus.FAILED)
        pool_s = time.monotonic() - killed
    finally:
        _stop(pool)
    # a lone worker takes the run (no pool running to race it for the claim); once it trains, a pool starts as
    # the reaper and registers; then the lone worker is killed and the pool's worker reaps its stale run
    alone = submit(store, parse_spec(tiny_spec(5001, epochs=500))).run_id
    lone = _worker(home, "--once")
    reaper = None
    try:
        _wait(lambda: _running(store, alone))
        started = time.time()
        reaper = _worker(home, "--workers", "1")
        _wait(lambda: any(w.pid != lone.pid and w.started_at >= started for w in store.list_workers()))
        lone.kill()
        lone.wait()
        killed = time.monotonic()
        _wait(lambda: store.get_run(alone).status is RunStatus.FAILED)
        stale_s = time.monotonic() - killed
    finally:
        lone.kill()
        if reaper is not None:
            _stop(reaper)
    return pool_s, stale_s


def run(quick: bool = False) -> list[dict]:
    runs, rounds = (10, 2) if quick else (30, 3)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fresh_s, cached_s = _submit_latency(Store(home / "latency.sqlite3"), 5 if quick else 20)
        rates: dict[int, list[float]] = {1: [], 2: []}
        for r in range(rounds):
            for workers in (1, 2) if r % 2 == 0 else (2, 1):
                rates[workers].append(_throughput(home / f"round{r}-{workers}", workers, runs, 0))
        pool_s, stale_s = _kill_latencies(home / "kill")
    per_round = [two / one for one, two in zip(rates[1], rates[2], strict=True)]
    records = [
        {"name": "jobs/submit_fresh", "value": fresh_s * 1e3, "unit": "ms"},
        {"name": "jobs/submit_cache_hit", "value": cached_s * 1e3, "unit": "ms"},
        {"name": f"jobs/tiny_runs_per_s_1_worker_{runs}_runs", "value": statistics.median(rates[1]), "unit": "runs/s"},
        {"name": f"jobs/tiny_runs_per_s_2_workers_{runs}_runs", "value": statistics.median(rates[2]), "unit": "runs/s"},
        {
            "name": "jobs/2_workers_over_1",
            **ratio_summary(per_round),
            "numerator": "2 workers",
            "denominator": "1 worker",
        },
        {"name": "jobs/kill_9_pool_worker_to_failed", "value": pool_s, "unit": "s"},
        {"name": f"jobs/kill_9_lone_worker_to_reaped_stale_{STALE_AFTER_S:g}s", "value": stale_s, "unit": "s"},
    ]
    report_unstable("jobs", records)
    return records

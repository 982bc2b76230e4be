"""Submitting one spec from many processes at once makes one run: the store looks for an answering run and
inserts a new one in the same write transaction. Before, 20 `submit`s released together created 2 runs
sharing one cache key (the check and the insert were separate transactions)."""

import multiprocessing
from collections import Counter

from cache import RunStatus, Store
from engine.jobs.submission import submit
from engine.jobs.sweep import submit_sweep
from engine.training import parse_spec
from tests.helpers import fast_spec

PROCESSES = 24
TIMEOUT_S = 300  # a hang bound, not a speed target


def _submit_after(barrier, results, path: str, spec: dict) -> None:
    store = Store(path)
    parsed = parse_spec(spec)
    barrier.wait()
    answer = submit(store, parsed)
    results.put((answer.run_id, answer.cached, answer.existing))


def _sweep_after(barrier, results, path: str, grid: dict) -> None:
    store = Store(path)
    barrier.wait()
    sweep = submit_sweep(store, grid)
    results.put((sweep.sweep_id, sweep.run_ids, sweep.created))


def run_together(target, path, payload) -> list:
    """`target` in PROCESSES forked processes released at once by a barrier; their results."""
    context = multiprocessing.get_context("fork")  # the children inherit the loaded engine: no second torch import
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    processes = [context.Process(target=target, args=(barrier, results, str(path), payload)) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    out = [results.get(timeout=TIMEOUT_S) for _ in processes]
    for process in processes:
        process.join(timeout=TIMEOUT_S)
        assert process.exitcode == 0
    return out


def test_concurrent_identical_submissions_make_one_run(store):
    answers = run_together(_submit_after, store.path, fast_spec(seed=11))
    ids = Counter(run_id for run_id, _, _ in answers)
    assert len(ids) == 1, f"{len(ids)} runs for one spec: {ids}"
    assert sorted(existing for _, _, existing in answers) == [False] + [True] * (PROCESSES - 1)
    assert not any(cached for _, cached, _ in answers)
    [run] = store.list_runs()
    assert run.status is RunStatus.QUEUED and [e.detail for e in store.events(run.id)] == ["submitted"]
    assert store.integrity_ok()


def test_concurrent_identical_sweeps_share_their_runs(store):
    grid = {"base": fast_spec(epochs=1), "grid": {"noise_multiplier": [1.0, 2.0]}, "seeds": [0, 1]}
    sweeps = run_together(_sweep_after, store.path, grid)
    assert len({sweep_id for sweep_id, _, _ in sweeps}) == PROCESSES, "each submission is a sweep of its own"
    assert len({run_ids for _, run_ids, _ in sweeps}) == 1, "all of them are the same four runs"
    assert sum(created for _, _, created in sweeps) == 4
    assert len(store.list_runs()) == 4 and store.integrity_ok()

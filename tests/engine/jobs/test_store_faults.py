"""Faults that strike a store mid-command: a process killed by SIGKILL while it imports, garbage-collects or deletes,
and a disk that fills while a worker trains, an import runs or an export is written. After each, the store passes
SQLite's integrity check, no run is lost, half-written or duplicated (an import and a deletion happen entirely or not
at all), no run is left "running", and once the fault is gone the same command succeeds.

The kills come from forked copies of this test process (no interpreter start-up per kill), each stopped at a
chosen moment inside the command: a patched step of the command tells the test it has been reached, then waits
for the signal. A few kills after a short delay add moments nobody chose.
"""

import os
import select
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import cache.store.archive_io
import cache.store.maintenance
from cache import RunStatus, Store
from cache.store.connection import StoreBase
from engine.cli import main
from tests.cache.store.test_maintenance import make_run

HANG_BOUND_S = 60.0
RUNS = 12


def run_set(path: Path) -> dict[str, tuple[str, int, int]]:
    """Each run's status, metric rows and status-history rows, read straight from the file."""
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute(
            "SELECT r.id, r.status, (SELECT COUNT(*) FROM metrics m WHERE m.run_id = r.id),"
            " (SELECT COUNT(*) FROM run_events e WHERE e.run_id = r.id) FROM runs r"
        ).fetchall()
    assert len(rows) == len({r[0] for r in rows})  # never a run twice
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> tuple[Path, dict]:
    return archived_runs(tmp_path_factory.mktemp("faults"))


def archived_runs(root: Path) -> tuple[Path, dict]:
    """An archive of RUNS finished and failed runs with many metric rows (in `root`), and the run set it holds."""
    store = Store(root / "source" / "runs.sqlite3")
    for seed in range(RUNS):
        make_run(store, RunStatus.FAILED if seed % 3 == 0 else RunStatus.FINISHED, seed=seed, steps=400)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPLAB_HOME", str(store.path.parent))
        assert main(["export", "--all", "--json", "-o", str(root / "runs.zip")]) == 0
        patch.setenv("DPLAB_HOME", str(root / "reference"))
        assert main(["import", "--json", str(root / "runs.zip")]) == 0
    return root / "runs.zip", run_set(root / "reference" / "runs.sqlite3")


@pytest.fixture
def filled(home, archive) -> Path:
    """A data home whose store holds the archive's runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPLAB_HOME", str(home))
        assert main(["import", str(archive[0])]) == 0
    return home / "runs.sqlite3"


def pause_at(module: object, name: str, *, after: int = 1) -> Callable[[int], None]:
    """A patch for the forked child: the `after`-th call of `module.name` tells the test (one byte on the pipe)
    and waits to be killed."""

    def install(signal_fd: int) -> None:
        original, calls = getattr(module, name), [0]

        def paused(*args, **kwargs):
            calls[0] += 1
            if calls[0] == after:
                os.write(signal_fd, b"!")
                time.sleep(HANG_BOUND_S)
            return original(*args, **kwargs)

        setattr(module, name, paused)

    return install


def pause_in_vacuum(signal_fd: int) -> None:
    """Stop the compaction's VACUUM part-way: once the compaction has begun (its first size reading), a progress
    handler on each new connection tells the test, then waits."""
    original_connect, original_bytes, armed = StoreBase.connect, cache.store.maintenance.store_bytes, [False]

    def store_bytes(store: StoreBase) -> int:
        armed[0] = True
        return original_bytes(store)

    @contextmanager
    def connect(self, **kwargs) -> Iterator[sqlite3.Connection]:
        with original_connect(self, **kwargs) as db:
            steps = [0]

            def progress() -> int:
                steps[0] += armed[0]
                if steps[0] == 20:
                    os.write(signal_fd, b"!")
                    time.sleep(HANG_BOUND_S)
                return 0

            db.set_progress_handler(progress, 1000)
            yield db

    cache.store.maintenance.store_bytes = store_bytes
    StoreBase.connect = connect


def killed(home: Path, argv: list[str], *, pause: Callable[[int], None] | None = None, delay: float = 0.0) -> int:
    """Run `python -m engine argv` in a forked child and SIGKILL it where `pause` stops it (or after `delay`
    seconds); the child's exit status (negative: killed)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_fd)
            os.environ["DPLAB_HOME"] = str(home)
            if pause is not None:
                pause(write_fd)
            code = main(argv)
        finally:
            os._exit(code)
    os.close(write_fd)
    if pause is not None:
        ready, _, _ = select.select([read_fd], [], [], HANG_BOUND_S)
        assert ready, "the child never reached the moment to kill it"
    else:
        time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(read_fd)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


IMPORT_MOMENTS = {
    "reading the archive": pause_at(cache.store.archive_io, "insert_archived_run", after=1),
    "half the runs inserted": pause_at(cache.store.archive_io, "insert_archived_run", after=RUNS // 2),
    "metrics of the last run": pause_at(cache.store.archive_io, "insert_metrics", after=RUNS),
}


@pytest.mark.parametrize("moment", list(IMPORT_MOMENTS))
def test_an_import_killed_midway_adds_nothing_and_the_store_stays_sound(moment, home, store, archive, capsys):
    path, expected = archive
    make_run(store, seed=99)
    before = run_set(store.path)
    assert killed(home, ["import", str(path)], pause=IMPORT_MOMENTS[moment]) == -signal.SIGKILL
    assert run_set(store.path) == before
    assert main(["import", str(path)]) == 0
    after = run_set(store.path)
    assert after == before | {i: (s, m, e) for i, (s, m, e) in expected.items()}


@pytest.mark.parametrize("delay", [0.1, 0.4])
def test_an_import_killed_at_any_moment_is_all_or_nothing(delay, home, store, archive, capsys):
    path, expected = archive
    before = run_set(store.path)
    killed(home, ["import", str(path)], delay=delay)
    assert run_set(store.path) in (before, before | expected)
    assert main(["import", str(path)]) == 0
    assert run_set(store.path) == before | expected


def failed_ids(runs: dict) -> set[str]:
    return {i for i, (status, _, _) in runs.items() if status == RunStatus.FAILED}


GC_MOMENTS = {
    "deleting": ("gc", pause_at(cache.store.maintenance, "release_runs")),
    "compacting": ("gc", pause_in_vacuum),
    "deleting by id": ("delete", pause_at(cache.store.maintenance, "release_runs")),
}


@pytest.mark.parametrize("moment", list(GC_MOMENTS))
def test_gc_and_delete_killed_midway_delete_all_or_nothing(moment, home, filled, capsys):
    command, pause = GC_MOMENTS[moment]
    before = run_set(filled)
    doomed = failed_ids(before)
    argv = ["gc", "--yes"] if command == "gc" else ["delete", "--yes", *sorted(doomed)]
    assert killed(home, argv, pause=pause) == -signal.SIGKILL
    after = run_set(filled)
    if moment == "compacting":  # the deletion committed before the VACUUM began
        assert after == {i: v for i, v in before.items() if i not in doomed}
    else:
        assert after == before
    assert main(argv) == 0
    assert run_set(filled) == {i: v for i, v in before.items() if i not in doomed}


@pytest.mark.parametrize("delay", [0.2])
def test_gc_killed_at_any_moment_deletes_all_or_nothing(delay, home, filled, capsys):
    before = run_set(filled)
    kept = {i: v for i, v in before.items() if i not in failed_ids(before)}
    killed(home, ["gc", "--yes"], delay=delay)
    assert run_set(filled) in (before, kept)
    assert main(["gc", "--yes"]) == 0
    assert run_set(filled) == kept

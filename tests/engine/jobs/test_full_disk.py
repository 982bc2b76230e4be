"""A disk that fills up under the store: while a worker trains, while an import or an export runs, under every
command that writes. Each is a named error (exit status 2, "free space in <folder> and retry") that writes nothing
half-way; a run whose metrics could not be written ends failed with a reason naming the full disk (never left
"running"); once there is room again, the store works as before and passes SQLite's integrity check.

Two ways to fill it: `PRAGMA max_page_count` on every connection (no privileges needed: the store itself refuses
to grow), and a small tmpfs as the data home, filled with a file (mounting needs root: elsewhere
those tests skip, saying so).
"""

import json
import os
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

import engine.cli
import engine.jobs.workers.worker as worker_module
from cache import RunStatus, Store, StoreFull
from cache.store.errors import disk_full
from engine.cli import main
from engine.jobs.submission import submit
from engine.jobs.workers.pool import Child, WorkerPool
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.engine.jobs.test_store_faults import archived_runs, run_set
from tests.helpers import fast_spec

FULL = r"the disk holding the store .+ is full \(.+\); nothing was written: free space in .+ and retry"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> tuple[Path, dict]:
    return archived_runs(tmp_path_factory.mktemp("full-disk"))


class CappedStore(Store):
    """A store that cannot grow past `cap` pages while a cap is set (class-wide: every command's store)."""

    cap: int | None = None

    @contextmanager
    def connect(self, **kwargs) -> Iterator[sqlite3.Connection]:
        with super().connect(**kwargs) as db:
            if type(self).cap is not None:
                db.execute(f"PRAGMA max_page_count={type(self).cap}")
            yield db

    @classmethod
    def fill(cls, path: Path) -> None:
        """No page more than the store has now."""
        with closing(sqlite3.connect(path)) as db:
            cls.cap = db.execute("PRAGMA page_count").fetchone()[0]


@pytest.fixture
def capped(home, monkeypatch, archive) -> CappedStore:
    """A store holding one finished run, opened by every command as a CappedStore (not capped yet)."""
    monkeypatch.setattr(engine.cli, "Store", CappedStore)
    monkeypatch.setattr(CappedStore, "cap", None)
    assert main(["import", str(archive[0])]) == 0
    return CappedStore(home / "runs.sqlite3")


def write_commands(files: Path, archive_path: Path, run_ids: list[str]) -> dict[str, list[str]]:
    (files / "spec.json").write_text(json.dumps(fast_spec(seed=123)))
    return {
        "import": ["import", str(archive_path)],
        "submit": ["submit", str(files / "spec.json")],
    }


@pytest.mark.parametrize("command", ["import", "submit"])
def test_a_full_store_is_a_named_error_for_every_write_and_works_once_there_is_room(
    command,
    capped,
    archive,
    tmp_path,
    capsys,
):
    before = run_set(capped.path)
    argv = write_commands(tmp_path, archive[0], sorted(before))[command]
    if command == "import":  # into an empty store: the archive's runs need room
        capped.path.unlink()
        CappedStore(capped.path)
        before = {}
    CappedStore.fill(capped.path)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(FULL, err[0]), err
    assert run_set(capped.path) == before
    CappedStore.cap = None
    assert main(argv) == 0
    assert run_set(capped.path) != before


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(worker_module, "FULL_RETRY_S", 0.01)


class FillsWhileTraining(Store):
    """The disk fills as soon as a run's first metrics are stored: every write after is refused, as SQLite refuses
    to append to its log on a full disk, until `room_after` writes were refused (then someone freed space)."""

    full = False
    refused = 0
    room_after = 3

    def append_metrics(self, run_id, rows, *, advance=True):
        cancel = super().append_metrics(run_id, rows, advance=advance)
        if advance and not type(self).refused:
            type(self).full = True
        return cancel

    @contextmanager
    def transaction(self, *, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        cls = type(self)
        if immediate and cls.full:
            cls.refused += 1
            cls.full = cls.refused < cls.room_after
            raise disk_full(self.path, "database or disk is full")
        with super().transaction(immediate=immediate) as db:
            yield db


def test_a_run_whose_metrics_meet_a_full_disk_ends_failed_naming_it(home, quick_retries, monkeypatch):
    monkeypatch.setattr(FillsWhileTraining, "full", False)
    monkeypatch.setattr(FillsWhileTraining, "refused", 0)
    store = FillsWhileTraining(home / "runs.sqlite3")
    spec = {k: v for k, v in fast_spec(epochs=1, noise_multiplier=1.0).items() if k != "target_epsilon"}
    run_id = submit(store, parse_spec(spec)).run_id
    Worker(store, data_dirs=[]).run_one()
    assert FillsWhileTraining.refused == FillsWhileTraining.room_after  # the failure waited for room
    run = store.get_run(run_id)
    assert run.status is RunStatus.FAILED
    assert "StoreFull" in run.error and "free space in" in run.error
    assert store.integrity_ok()
    assert store.metrics(run_id)  # what it wrote before the disk filled stays


# ---------------------------------------------------------------------------------------- a real full disk


def mount_small_disk(mount_point: Path, size: str = "2m") -> bool:
    mount_point.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)]).returncode == 0


def fill_disk(folder: Path, *, leave: int = 0) -> Path:
    """A file taking every free byte of `folder`'s file system but `leave`."""
    filler = folder / "filler"
    info = os.statvfs(folder)
    free = info.f_bavail * info.f_frsize - leave
    with open(filler, "wb") as file:
        try:
            file.write(b"\0" * max(0, free))
            file.flush()
        except OSError:
            pass
    return filler


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 2 MiB tmpfs as the data home (mounting needs root; the page-cap tests above need nothing)."""
    point = tmp_path / "disk"
    if os.geteuid() != 0 or not mount_small_disk(point):
        pytest.skip("mounting a small tmpfs needs root; the max_page_count tests cover the same paths without it")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def assert_full_disk_error(argv: list[str], capsys, message: str = FULL) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err


def test_an_import_onto_a_full_disk_adds_nothing_and_succeeds_once_there_is_room(
    small_disk,
    archive,
    monkeypatch,
    capsys,
):
    path, expected = archive
    monkeypatch.setenv("DPLAB_HOME", str(small_disk))
    assert main(["runs"]) == 0
    filler = fill_disk(small_disk, leave=64 << 10)  # room to open the store, not for the archive's rows
    assert_full_disk_error(["import", str(path)], capsys)
    assert run_set(small_disk / "runs.sqlite3") == {}
    filler.unlink()
    assert main(["import", str(path)]) == 0
    assert run_set(small_disk / "runs.sqlite3") == expected


@pytest.mark.parametrize("command", ["delete", "gc", "submit"])
def test_writes_on_a_full_disk_are_named_errors_that_change_nothing(
    command,
    small_disk,
    archive,
    monkeypatch,
    capsys,
    tmp_path,
):
    path, expected = archive
    monkeypatch.setenv("DPLAB_HOME", str(small_disk))
    assert main(["import", str(path)]) == 0
    argv = {"delete": ["delete", "--yes", *sorted(expected)[:3]], "gc": ["gc", "--yes"]}.get(command)
    argv = argv or write_commands(tmp_path, path, sorted(expected))[command]
    filler = fill_disk(small_disk)
    assert_full_disk_error(argv, capsys)
    filler.unlink()
    assert run_set(small_disk / "runs.sqlite3") == expected
    assert main(argv) == 0
    assert run_set(small_disk / "runs.sqlite3") != expected


def test_an_export_onto_a_full_disk_is_a_named_error(small_disk, home, archive, capsys):
    path, expected = archive
    assert main(["import", str(path)]) == 0
    filler = fill_disk(small_disk)
    assert_full_disk_error(["export", "--all", "-o", str(small_disk / "out.zip")], capsys, r"No space left|full")
    filler.unlink()
    assert run_set(home / "runs.sqlite3") == expected
    assert not (small_disk / "out.zip").exists()


class FillsTheDiskWhileTraining(Store):
    """Fills its file system for real (a filler file) once a run's first metrics are stored, and frees it after
    SQLite refused `room_after` writes."""

    filler: Path | None = None
    refused = 0
    room_after = 3

    def append_metrics(self, run_id, rows, *, advance=True):
        cancel = super().append_metrics(run_id, rows, advance=advance)
        cls = type(self)
        if advance and cls.filler is None:
            cls.filler = fill_disk(self.path.parent)
        return cancel

    @contextmanager
    def transaction(self, *, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        cls = type(self)
        try:
            with super().transaction(immediate=immediate) as db:
                yield db
        except StoreFull:
            cls.refused += 1
            if cls.refused >= cls.room_after and cls.filler is not None and cls.filler.exists():
                cls.filler.unlink()
            raise


def test_a_run_on_a_disk_that_fills_ends_failed_naming_it(small_disk, quick_retries, monkeypatch):
    monkeypatch.setenv("DPLAB_HOME", str(small_disk))
    monkeypatch.setattr(FillsTheDiskWhileTraining, "filler", None)
    monkeypatch.setattr(FillsTheDiskWhileTraining, "refused", 0)
    store = FillsTheDiskWhileTraining(small_disk / "runs.sqlite3")
    spec = {k: v for k, v in fast_spec(epochs=1, noise_multiplier=1.0).items() if k != "target_epsilon"}
    run_id = submit(store, parse_spec(spec)).run_id
    Worker(store, data_dirs=[]).run_one()
    run = store.get_run(run_id)
    assert FillsTheDiskWhileTraining.refused >= 1
    assert run.status is RunStatus.FAILED and "StoreFull" in run.error and "free space in" in run.error, run.error
    assert store.integrity_ok()
    assert submit(store, parse_spec(fast_spec(seed=5))).run_id  # room again: the store works


class FullForWriteOffs(Store):
    def fail_worker_runs(self, worker: str, *, reason: str):
        raise disk_full(self.path, "database or disk is full")


def test_a_pool_whose_store_is_full_keeps_supervising(home, caplog):
    """A worker died and its runs cannot be written off now: the pool says so and goes on (the stale-heartbeat
    reaper writes them off once there is room)."""
    pool = WorkerPool(FullForWriteOffs(home / "runs.sqlite3"), workers=1, gpus=0)
    child = Child(slot=0, process=SimpleNamespace(pid=4242))
    pool.handle_exit(child, -9)
    assert "not written off yet" in caplog.text and "free space in" in caplog.text

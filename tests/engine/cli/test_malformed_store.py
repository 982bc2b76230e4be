"""A store file of every bad kind (not a database, truncated, damaged, from newer code, another program's database,
read-only, a folder, a pipe or /dev/null in its place, a data home that is a file) under every command that opens
the store: each gets exit status 2, one line `error: ...` naming the problem and what to do, and leaves the data
home byte for byte as it was (a SHA-256 of every file in it, before and after)."""

import gzip
import hashlib
import io
import json
import os
import re
import sqlite3
import stat
import subprocess
import zipfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from cache import Store, StoreUnusable
from cache.store.schema import SCHEMA_VERSION
from engine import api
from engine.cli import main
from tests.engine.jobs.test_transfer import populated
from tests.helpers import fast_spec

STORE = "runs.sqlite3"


def damaged(why: str = "") -> str:
    return rf"is damaged \([^)]*{why}[^)]*\); it was left as it was: restore it from a backup"


DAMAGED = damaged()
NOT_A_DB = r"is not an SQLite database.*; it was left as it was: point DPLAB_HOME at another folder"
READ_ONLY = r"is read-only \(.+\); nothing was written: make the file and its folder .+ writable"


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> tuple[bytes, dict[str, str], Path]:
    """A populated store's bytes (one file: its log checkpointed), its run ids, and a folder with a spec file and
    an archive of its runs."""
    root = tmp_path_factory.mktemp("store")
    store = Store(root / STORE)
    ids = populated(store)
    with closing(sqlite3.connect(store.path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (root / "spec.json").write_text(json.dumps(fast_spec(seed=99)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPLAB_HOME", str(root))
        assert main(["export", "--all", "-o", str(root / "runs.zip")]) == 0
    return (root / STORE).read_bytes(), ids, root


def _zip_of(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(STORE, data)
    return buffer.getvalue()


def _with_user_version(data: bytes, version: int, folder: Path) -> bytes:
    path = folder / "versioned.sqlite3"
    path.write_bytes(data)
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version={version}")
    return path.read_bytes()


def _foreign_database(folder: Path) -> bytes:
    path = folder / "foreign.sqlite3"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
        db.execute("INSERT INTO contacts VALUES ('Ada', '555')")
        db.commit()
    return path.read_bytes()


def _page_size(data: bytes) -> int:
    return int.from_bytes(data[16:18], "big")


# Each case writes the bad store into the data home `home` (from the good store's bytes) and returns the data home
# to point DPLAB_HOME at; the expected message as a regular expression.
Case = tuple[Callable[[Path, bytes], Path], str]


def _file(make: Callable[[bytes, Path], bytes]) -> Callable[[Path, bytes], Path]:
    def write(home: Path, good: bytes) -> Path:
        (home / STORE).write_bytes(make(good, home.parent))
        return home

    return write


def _store_and_log(log: Callable[[bytes], bytes]) -> Callable[[Path, bytes], Path]:
    def write(home: Path, good: bytes) -> Path:
        (home / STORE).write_bytes(good)
        Path(home, f"{STORE}-wal").write_bytes(log(good))
        return home

    return write


def _pipe_as_log(home: Path, good: bytes) -> Path:
    (home / STORE).write_bytes(good)
    os.mkfifo(home / f"{STORE}-wal")
    return home


def _folder_in_place(home: Path, good: bytes) -> Path:
    (home / STORE).mkdir()
    (home / STORE / "note.txt").write_text("a folder where the store should be")
    return home


def _fifo_in_place(home: Path, good: bytes) -> Path:
    os.mkfifo(home / STORE)
    return home


def _dev_null_in_place(home: Path, good: bytes) -> Path:
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    (home / STORE).symlink_to("/dev/null")
    return home


def _link_to_nothing(home: Path, good: bytes) -> Path:
    (home / STORE).symlink_to(home / "moved-away.sqlite3")
    return home


def _home_is_a_file(home: Path, good: bytes) -> Path:
    (home / "not-a-folder").write_bytes(good)
    return home / "not-a-folder"


def _home_under_a_file(home: Path, good: bytes) -> Path:
    (home / "file").write_text("a file")
    return home / "file" / "home"


CASES: dict[str, Case] = {
    "random bytes": (_file(lambda good, _: hashlib.sha512(b"x").digest() * 128), NOT_A_DB),
    "a text file": (_file(lambda good, _: b"runs: none yet\n" * 20), NOT_A_DB),
    "a JSON file": (_file(lambda good, _: json.dumps({"runs": []}).encode()), NOT_A_DB),
    "a zip of the store": (_file(lambda good, _: _zip_of(good)), NOT_A_DB),
    "a gzip of the store": (_file(lambda good, _: gzip.compress(good)), NOT_A_DB),
    "all zeros": (_file(lambda good, _: bytes(8192)), NOT_A_DB),
    "its header wiped": (_file(lambda good, _: bytes(16) + good[16:]), NOT_A_DB),
    "a page size of 3": (_file(lambda good, _: good[:16] + (3).to_bytes(2, "big") + good[18:]), NOT_A_DB),
    "only the magic string": (_file(lambda good, _: good[:20]), damaged("shorter than its header")),
    "only the header": (_file(lambda good, _: good[:100]), damaged("truncated")),
    "truncated to one page": (_file(lambda good, _: good[: _page_size(good)]), damaged("truncated")),
    "truncated to half": (_file(lambda good, _: good[: len(good) // 2]), damaged("truncated")),
    "truncated to three quarters": (_file(lambda good, _: good[: 3 * len(good) // 4]), damaged("truncated")),
    "one byte short": (_file(lambda good, _: good[:-1]), damaged("truncated")),
    "its schema page overwritten": (_file(lambda good, _: good[:100] + b"\xff" * 3996 + good[4096:]), DAMAGED),
    "its schema page zeroed": (_file(lambda good, _: good[:100] + bytes(3996) + good[4096:]), DAMAGED),
    "the header and random pages": (_file(lambda good, _: good[:100] + bytes(range(256)) * 32), DAMAGED),
    "a log that is not one": (_store_and_log(lambda good: b"not a write-ahead log" * 50), damaged("log")),
    "a log copied from the store": (_store_and_log(lambda good: good), damaged("log")),
    "a pipe as its log": (_pipe_as_log, damaged("log runs.sqlite3-wal is no file")),
    "a newer schema": (
        _file(lambda good, folder: _with_user_version(good, SCHEMA_VERSION + 1, folder)),
        r"schema version \d+, newer than this code's \d+.*update this code, or point DPLAB_HOME at another folder",
    ),
    "a far newer schema": (
        _file(lambda good, folder: _with_user_version(good, 2**31 - 1, folder)),
        r"schema version 2147483647, newer.*update this code",
    ),
    "another program's database": (_file(lambda good, folder: _foreign_database(folder)), r"another program"),
    "a folder in its place": (_folder_in_place, r"is a folder, not a file; it was left as it was"),
    "a pipe in its place": (_fifo_in_place, r"is not a regular file"),
    "a link to /dev/null": (_dev_null_in_place, r"is not a regular file"),
    "a link to nothing": (_link_to_nothing, r"is a link to .+, which does not exist"),
    "a data home that is a file": (_home_is_a_file, r"data home .+ \(DPLAB_HOME\) is not a folder: point DPLAB_HOME"),
    "a data home under a file": (_home_under_a_file, r"data home .+ \(DPLAB_HOME\) is not a folder"),
}


def commands(ids: dict[str, str], files: Path, out: Path) -> dict[str, list[str]]:
    """Every command that opens the store: readers and writers."""
    return {
        "runs": ["runs"],
        "show": ["show", ids["finished"]],
        "size": ["size", "--json"],
        "gc": ["gc", "--yes"],
        "delete": ["delete", "--yes", ids["failed"]],
        "cancel": ["cancel", ids["queued"]],
        "submit": ["submit", str(files / "spec.json")],
        "export": ["export", "--all", "-o", str(out)],
        "import": ["import", str(files / "runs.zip")],
    }


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: a SHA-256 of each file, a link's target, the kind of anything else."""
    seen = {}
    for root, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            path = Path(root, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                seen[str(path)] = f"link to {os.readlink(path)}"
            elif stat.S_ISREG(mode):
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                seen[str(path)] = "folder" if stat.S_ISDIR(mode) else "special"
    return seen


def assert_named_error(argv: list[str], message: str, capsys) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    assert re.search(message, lines[0]), err


ALL_COMMANDS = ("runs", "show", "size", "gc", "delete", "cancel", "submit", "export", "import")
COMMANDS = ("runs", "gc", "import")  # a reader and two writers (one deletes, one inserts), for every case


def test_the_module_covers_at_least_25_bad_stores():
    assert len(CASES) >= 25


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_store_truncated_to_half_is_a_named_error_for_every_command(
    command, good_store, tmp_path, monkeypatch, capsys
):
    good, ids, files = good_store
    (tmp_path / STORE).write_bytes(good[: len(good) // 2])
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path))
    assert_named_error(commands(ids, files, tmp_path / "out.zip")[command], damaged("truncated"), capsys)
    assert (tmp_path / STORE).read_bytes() == good[: len(good) // 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [STORE]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_store_is_a_named_error_and_left_as_it_was(case, command, good_store, tmp_path, monkeypatch, capsys):
    good, ids, files = good_store
    make, message = CASES[case]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DPLAB_HOME", str(make(home, good)))
    out = tmp_path / "out.zip"
    before = snapshot(tmp_path)
    assert_named_error(commands(ids, files, out)[command], message, capsys)
    assert snapshot(tmp_path) == before
    assert not out.exists()


# ---------------------------------------------------------------------------------------- read-only stores


def _immutable(path: Path, on: bool) -> bool:
    """chattr ±i (the only way to stop root writing here, short of a mount); whether it worked."""
    flag = "+i" if on else "-i"
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


@pytest.fixture
def read_only(tmp_path):
    """A function making a path read-only for this process (immutable for root, mode bits for others), undone
    after the test."""
    made: list[tuple[Path, int]] = []

    def make(path: Path) -> None:
        made.append((path, path.stat().st_mode))
        if os.geteuid() == 0:
            if not _immutable(path, True):
                pytest.skip("running as root on a file system without chattr +i: no way to make a file read-only")
        else:
            path.chmod(path.stat().st_mode & ~0o222)

    yield make
    for path, mode in reversed(made):
        if os.geteuid() == 0:
            _immutable(path, False)
        path.chmod(mode)


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_read_only_data_home_is_a_named_error_for_every_command(
    command, good_store, read_only, tmp_path, monkeypatch, capsys
):
    good, ids, files = good_store
    home = tmp_path / "home"
    home.mkdir()
    (home / STORE).write_bytes(good)
    read_only(home / STORE)
    read_only(home)
    monkeypatch.setenv("DPLAB_HOME", str(home))
    before = snapshot(tmp_path)
    assert_named_error(commands(ids, files, tmp_path / "out.zip")[command], READ_ONLY, capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", ["gc", "delete", "cancel", "submit", "import"])
def test_a_read_only_store_file_refuses_every_write_and_keeps_its_bytes(
    command, good_store, read_only, tmp_path, monkeypatch, capsys
):
    """The folder writable (SQLite may add its -wal and -shm files there), the store file not: reads work, each
    write is a named error."""
    good, ids, files = good_store
    home = tmp_path / "home"
    home.mkdir()
    (home / STORE).write_bytes(good)
    read_only(home / STORE)
    monkeypatch.setenv("DPLAB_HOME", str(home))
    assert main(["runs"]) == 0
    assert_named_error(commands(ids, files, tmp_path / "out.zip")[command], READ_ONLY, capsys)
    assert (home / STORE).read_bytes() == good


def test_an_empty_store_file_is_a_new_store(tmp_path, monkeypatch, capsys):
    """Not an error: SQLite's own reading of an empty file (a store about to be created)."""
    (tmp_path / STORE).touch()
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path))
    assert main(["runs", "--json"]) == 0
    assert Store(tmp_path / STORE).integrity_ok()


def test_a_bad_store_leaves_no_new_files_behind(good_store, tmp_path, monkeypatch, capsys):
    """Refused before SQLite opens it: no -wal or -shm file next to a file that is no store."""
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path))
    (tmp_path / STORE).write_bytes(b"hello")
    assert main(["runs"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [STORE]


@pytest.mark.parametrize("case", ["truncated to half"])
def test_the_dashboard_shows_a_bad_store_as_one_error_and_leaves_it(case, good_store, tmp_path, monkeypatch):
    from tests.apptest_helpers import open_app  # Streamlit, imported only here

    make, message = CASES[case]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DPLAB_HOME", str(make(home, good_store[0])))
    before = snapshot(tmp_path)
    at = open_app()  # no exception: the page shows the error instead
    assert len(at.error) == 1 and re.search(message, at.error[0].value), [e.value for e in at.error]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", ["truncated to half", "a text file", "a newer schema"])
def test_the_notebook_api_raises_the_same_named_error(case, good_store, tmp_path, monkeypatch):
    make, message = CASES[case]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DPLAB_HOME", str(make(home, good_store[0])))
    before = snapshot(tmp_path)
    with pytest.raises(StoreUnusable, match=message):
        api.runs()
    assert snapshot(tmp_path) == before

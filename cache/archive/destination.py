"""Where an archive may be written: the one rule every export to a path goes through (`save_archive`).

An export writes a NEW file. With `force` it may replace an existing regular file, one that is no part of
a store. It never writes over, whatever `force` says:

- a run store or any file of one: the store itself, its `-wal`, `-shm` and `-journal` (by name, and by
  inode for a hard link to one), and any SQLite database, write-ahead log or rollback journal anywhere
  (recognised by its first bytes);
- anything in the data home (`DPLAB_HOME`) that is not a run archive the lab wrote (a `.zip` whose manifest
  says so): a new file there must be named `.zip`;
- a directory, a device, a FIFO, a socket, or a symbolic link (never followed: `lstat`);
- a path whose folder does not exist, or a file or folder without write permission.

The archive is written to a temporary file in the target's folder, synced, then put in place: without
`force` by `os.link`, which fails if a file of that name appeared meanwhile (nothing is ever replaced);
with `force` by `os.replace`, after checking again (`lstat`) that the name still holds the very file
that was checked. A rename only ever replaces the name, never the file another name points at, so a
store reached by a hard link survives even a swap in between. A full disk (or any failure to write)
removes the temporary file and leaves the target as it was.

Every refusal is an `ExportTargetError` (an `ArchiveError`) of one line: the path, what it is, and
what to do.
"""

import errno
import io
import os
import secrets
import stat
import zipfile
from collections.abc import Iterable
from pathlib import Path

from cache.archive.format import FORMAT_NAME, ArchiveError
from cache.archive.limits import KINDS, shown_path, strict_json
from cache.paths import data_home, store_path

STORE_COMPANIONS = ("", "-wal", "-shm", "-journal")  # the files SQLite keeps beside a database
SQLITE_MAGIC = {
    b"SQLite format 3\x00": "a SQLite database",
    b"\x37\x7f\x06\x82": "a SQLite write-ahead log",
    b"\x37\x7f\x06\x83": "a SQLite write-ahead log",
    b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7": "a SQLite rollback journal",
}
MAX_MANIFEST_BYTES = 1 << 20
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)  # never an existing file
ELSEWHERE = "write the archive to a new file elsewhere"


class ExportTargetError(ArchiveError):
    """The path an archive would be written to is refused; the message says what it is and what to do."""


def save_archive(data: bytes, path: Path | str, *, force: bool = False, stores: Iterable[Path | str] = ()) -> Path:
    """Write `data` (an archive's bytes) to `path` under the rule of this module. `stores`: run stores to
    protect besides the data home's (the one the archive was read from)."""
    target = Path(path)
    protected = [Path(s) for s in stores] + [store_path()]
    seen = check_target(target, force=force, stores=protected)
    folder = target.parent
    temporary = str(folder / f".{target.name[:64]}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    try:
        fd = os.open(temporary, NEW_FILE, 0o666)  # the usual permissions of a new file (the umask applies)
    except OSError as exc:
        raise _refused(target, f"cannot create a file in its folder ({exc.strerror or exc})") from None
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if seen is None:
            _link_new(temporary, target)
        else:
            if _identity(target) != seen:
                raise _refused(target, "changed while the archive was written; nothing was replaced")
            check_target(target, force=force, stores=protected)
            os.replace(temporary, target)
    except OSError as exc:
        raise _refused(target, _write_failure(exc, len(data))) from None
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
    return target


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _link_new(temporary: str, target: Path) -> None:
    """The written file under the name `target`, which must not exist (never replaced, even if it appeared
    after the check)."""
    try:
        os.link(temporary, target, follow_symlinks=False)
    except FileExistsError:
        raise _refused(target, "exists now (it appeared while the archive was written); nothing was replaced") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        _create_new(target, temporary)  # a file system without hard links


def _create_new(target: Path, temporary: str) -> None:
    """`target` created (it must not exist) and filled with the temporary file's bytes."""
    try:
        fd = os.open(target, NEW_FILE, 0o666)
    except FileExistsError:
        raise _refused(target, "exists now (it appeared while the archive was written); nothing was replaced") from None
    try:
        with open(temporary, "rb") as source:
            _write_all(fd, source.read())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(target)  # ours: created above, with O_EXCL
        raise
    os.close(fd)


def _write_failure(exc: OSError, size: int) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"the disk is full ({exc.strerror}) while writing {size:,} bytes; nothing was written: free space "
            "or write the archive elsewhere"
        )
    return f"cannot write ({exc.strerror or exc}); nothing was written"


def _refused(target: Path, why: str) -> ExportTargetError:
    shown = shown_path(target).replace("\0", "\\0")  # a NUL shown, never written to the terminal
    return ExportTargetError(f"{shown}: {why}")


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino, info.st_mode


def _real(path: Path) -> Path:
    """`path` with its folder resolved (symbolic links, `..`) and its own name kept as it is."""
    return Path(os.path.realpath(path.parent)) / path.name


def check_target(target: Path, *, force: bool, stores: Iterable[Path]) -> tuple[int, int, int] | None:
    """Refuse `target` (`ExportTargetError`) unless an archive may be written there; the identity of the
    existing file `force` allows to replace (None: the name is free)."""
    if "\0" in os.fspath(target):
        raise _refused(target, "holds a NUL character, which no file name may hold; give another path")
    if not target.name or target.name in (".", ".."):
        raise _refused(target, "is not a file name; give the path of the archive to write, such as runs.zip")
    folder = target.parent
    try:
        folder_info = os.stat(folder)
    except OSError as exc:
        missing = f"cannot write: its folder {shown_path(folder)} does not exist ({exc.strerror}); create it first"
        raise _refused(target, missing) from None
    if not stat.S_ISDIR(folder_info.st_mode):
        raise _refused(target, f"{shown_path(folder)} is not a folder; give a path in an existing folder")
    if not _writable(folder, folder_info):
        raise _refused(target, "its folder is not writable; write the archive to a folder you may write to")
    real = _real(target)
    _check_not_store(target, real, stores)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise _refused(target, f"cannot be checked ({exc.strerror or exc}); give another path") from None
    home = Path(os.path.realpath(data_home()))
    in_home = real.is_relative_to(home)
    if info is None:
        if in_home and real.suffix.lower() != ".zip":
            raise _refused(target, f"is in the data home ({shown_path(home)}); an archive there must be named .zip")
        return None
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        raise _refused(target, f"is a symbolic link; links are not followed: {ELSEWHERE} (give the real path)")
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in KINDS.items() if test(mode)), "not a regular file")
        raise _refused(target, f"is {kind}, not a file; {ELSEWHERE}")
    _check_not_store_file(target, info, stores)
    if in_home and not is_run_archive(target):
        raise _refused(target, f"is a file of the data home ({shown_path(home)}) and not a run archive; {ELSEWHERE}")
    if not force:
        raise _refused(target, "already exists; give a new file name, or --force to replace this file")
    if not _writable(target, info):
        raise _refused(target, f"is read-only; {ELSEWHERE} (or make it writable first)")
    return info.st_dev, info.st_ino, info.st_mode


def _writable(path: Path, info: os.stat_result) -> bool:
    """Whether the caller may write to `path`: by its permissions (as root too: a file no one may write to
    is not replaced)."""
    return os.access(path, os.W_OK) and bool(stat.S_IMODE(info.st_mode) & 0o222)


def _check_not_store(target: Path, real: Path, stores: Iterable[Path]) -> None:
    """Refuse the name of a store or of one of its companion files (whether or not it exists now)."""
    for store in stores:
        base = _real(Path(os.path.abspath(store)))
        for suffix in STORE_COMPANIONS:
            if real == base.with_name(base.name + suffix):
                what = "the run store" if not suffix else f"the run store's {suffix[1:]} file"
                raise _refused(target, f"is {what} ({shown_path(base)}); {ELSEWHERE}")


def _check_not_store_file(target: Path, info: os.stat_result, stores: Iterable[Path]) -> None:
    """Refuse an existing file that is a store's file by another name (a hard link) or any SQLite file."""
    for store in stores:
        for suffix in STORE_COMPANIONS:
            try:
                other = os.stat(f"{store}{suffix}")
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino):
                raise _refused(target, f"is a link to a file of the run store {shown_path(store)}; {ELSEWHERE}")
    try:
        with open(target, "rb", buffering=0) as handle:  # a regular file (checked): opening never blocks
            head = handle.read(16)
    except OSError as exc:
        raise _refused(target, f"cannot be read to check what it is ({exc.strerror or exc}); {ELSEWHERE}") from None
    for magic, what in SQLITE_MAGIC.items():
        if head.startswith(magic):
            raise _refused(target, f"is {what}; a database is never overwritten: {ELSEWHERE}")


def is_run_archive(path: Path) -> bool:
    """Whether the regular file `path` is a run archive (a zip whose manifest names the format)."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("manifest.json")
            if info.file_size > MAX_MANIFEST_BYTES:
                return False
            manifest = strict_json(archive.read(info), where="manifest.json")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, io.UnsupportedOperation):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME

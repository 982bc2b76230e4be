"""What can go wrong with a store file, named: the one home that turns SQLite's and the operating system's
failures into `StoreError`s whose one-line message says what happened and what to do.

`StoreUnusable` and its kinds mean no operation on the store can succeed until the user acts (the file is
damaged or no database, the disk is full, the file or its folder is read-only, a newer version of the lab
wrote it); a plain `StoreError` is about one request (an unknown run, a run that cannot be deleted yet).
Nothing is ever "repaired" by overwriting: a file that is not a store is refused before SQLite writes to it
(`check_store_file`), and a failing transaction rolls back, so the file stays as it was.
"""

import errno
import os
import sqlite3
import stat
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"
WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
HEADER_BYTES = 100
LOW_SPACE_BYTES = 1 << 20  # a disk I/O error with less free space than this is a full disk
MOVE_ASIDE = (
    "point DPLAB_HOME at another folder, or move the file (with its -wal and -shm files) aside to start a new store"
)


class StoreError(RuntimeError):
    """The store cannot do what was asked (an unknown run, a run that cannot be deleted yet, ...)."""


class StoreUnusable(StoreError):
    """The store file cannot be used at all until the user acts; the message says how."""


class StoreDamaged(StoreUnusable):
    """The file is not a database, not a store, or a damaged one (truncated, overwritten)."""


class StoreReadOnly(StoreUnusable):
    """The file or its folder cannot be written."""


class StoreFull(StoreUnusable):
    """The disk (or file system) holding the store has no space left."""


class StoreTooNew(StoreUnusable):
    """A newer version of the lab wrote the store."""


def damaged(path: Path, why: str) -> StoreDamaged:
    return StoreDamaged(
        f"the store {path} is damaged ({why}); it was left as it was: restore it from a backup, or {MOVE_ASIDE}"
    )


def not_a_store(path: Path, what: str) -> StoreDamaged:
    return StoreDamaged(f"the store {path} is {what}; it was left as it was: {MOVE_ASIDE}")


def read_only(path: Path, why: str) -> StoreReadOnly:
    return StoreReadOnly(
        f"the store {path} is read-only ({why}); nothing was written: make the file and its folder {path.parent} "
        "writable, or point DPLAB_HOME at a writable folder"
    )


def disk_full(path: Path, why: str) -> StoreFull:
    return StoreFull(
        f"the disk holding the store {path} is full ({why}); nothing was written: free space in {path.parent} and retry"
    )


def too_new(path: Path, version: int, supported: int) -> StoreTooNew:
    return StoreTooNew(
        f"the store {path} has schema version {version}, newer than this code's {supported}: a newer version of the "
        "lab wrote it; it was left as it was: update this code, or point DPLAB_HOME at another folder"
    )


def _header_pages(header: bytes) -> int | None:
    """The page count the header records, None where it may be stale (written by an old SQLite)."""
    valid = header[24:28] == header[92:96]
    return int.from_bytes(header[28:32], "big") if valid else None


def check_store_file(path: Path) -> None:
    """Refuse, before SQLite opens (and might write to) it, a store path that is not a store file: a folder, a
    device or pipe, a file that is not an SQLite database, one truncated below the size its header records, or a
    write-ahead log that is not one, a link to nothing. A missing or empty file is a new store."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # SQLite would create the file at the link's target
            raise not_a_store(path, f"a link to {os.readlink(path)}, which does not exist") from None
        return
    except OSError as exc:
        raise failure(path, exc) or not_a_store(path, f"unreadable ({exc.strerror})") from exc
    if stat.S_ISDIR(info.st_mode):
        raise not_a_store(path, "a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise not_a_store(path, "not a regular file (a device, pipe or socket)")
    if info.st_size == 0:
        return
    try:
        with open(path, "rb") as file:
            header = file.read(HEADER_BYTES)
    except OSError as exc:
        raise failure(path, exc) or not_a_store(path, f"unreadable ({exc.strerror})") from exc
    if not header.startswith(SQLITE_HEADER):
        raise not_a_store(path, "not an SQLite database")
    if len(header) < HEADER_BYTES:
        raise damaged(path, f"truncated to {info.st_size} bytes, shorter than its header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    wal = Path(f"{path}-wal")
    wal_bytes, magic = _log_start(wal)
    if len(magic) == 4 and magic not in WAL_MAGIC and magic != bytes(4):  # zeros: a log the system never wrote out
        raise damaged(path, f"its write-ahead log {wal.name} is not one")
    pages = _header_pages(header)
    if wal_bytes == 0 and pages is not None and pages * page_size > info.st_size:
        raise damaged(path, f"truncated: {info.st_size:,} bytes of the {pages * page_size:,} its header records")


def _log_start(wal: Path) -> tuple[int, bytes]:
    """The size of a write-ahead log and its first 4 bytes; (-1, b"") where it cannot be read (SQLite will say
    why), (0, b"") where there is none. A folder, pipe or device in its place is a damaged store."""
    try:
        info = os.stat(wal)
    except FileNotFoundError:
        return 0, b""
    except OSError:
        return -1, b""
    if not stat.S_ISREG(info.st_mode):  # never opened: a pipe would block
        raise damaged(wal.with_name(wal.name.removesuffix("-wal")), f"its write-ahead log {wal.name} is no file")
    try:
        with open(wal, "rb") as file:
            return info.st_size, file.read(4)
    except OSError:
        return -1, b""


def failure(path: Path, exc: BaseException) -> StoreUnusable | None:
    """The named error for a failure of the store file itself (SQLite's or the system's), None for anything else
    (a bug, a lock held too long)."""
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return disk_full(path, exc.strerror or "no space left on device")
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return read_only(path, exc.strerror or "permission denied")
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            return not_a_store(path, f"inside {path.parent}, which is not a folder")
        return None
    if not isinstance(exc, sqlite3.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", -1) & 0xFF
    detail = str(exc)
    if code == sqlite3.SQLITE_FULL:
        return disk_full(path, detail)
    if code == sqlite3.SQLITE_NOTADB:
        return not_a_store(path, f"not an SQLite database ({detail})")
    if code == sqlite3.SQLITE_CORRUPT:
        return damaged(path, detail)
    if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH):
        return read_only(path, detail)
    if code == sqlite3.SQLITE_CANTOPEN:
        return read_only(path, detail) if not _writable(path) else not_a_store(path, f"impossible to open ({detail})")
    if code == sqlite3.SQLITE_IOERR:  # a full disk too, where SQLite grows its -shm file
        if _no_space(path.parent):
            return disk_full(path, detail)
        if not _writable(path):
            return read_only(path, detail)
        return StoreUnusable(
            f"the store {path} could not be read or written ({detail}); nothing was written: check the disk "
            f"holding {path.parent} (full, read-only or failing?) and retry"
        )
    return None


def _no_space(folder: Path) -> bool:
    """Whether the file system holding `folder` has (almost) no space left for a user."""
    try:
        info = os.statvfs(folder)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < LOW_SPACE_BYTES


def _writable(path: Path) -> bool:
    """Whether the store's folder, and the file where it exists, can be written (root included: a read-only
    mount or an immutable file count)."""
    folder_ok = os.access(path.parent, os.W_OK)
    return folder_ok and (not path.exists() or os.access(path, os.W_OK))

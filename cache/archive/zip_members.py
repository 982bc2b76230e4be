"""The zip container of a run archive, read defensively: the source opened within `MAX_ARCHIVE_BYTES`, the
directory checked before anything is inflated (member names, counts, declared sizes, encryption,
compression), and members read in bounded memory, whole when small or as chunks of UTF-8 text, each checked
against its declared size. What the members hold is `cache.archive.reader`'s concern.

Every check raises `ArchiveError` naming the member.
"""

import codecs
import io
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from cache.archive import format as archive_format
from cache.archive.format import MAX_ARCHIVE_BYTES, MAX_MEMBERS, METRICS_MEMBER, ArchiveError
from cache.archive.limits import InputError, open_regular_file

CHUNK_CHARACTERS = 1 << 20
FIXED_MEMBERS = ("manifest.json", "runs.json", "sweeps.json")
Source = bytes | bytearray | memoryview | str | os.PathLike | BinaryIO
ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)


def open_source(source: Source) -> BinaryIO:
    """The archive's bytes as a seekable file: bytes in memory, a regular file's path, or a file object."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        if len(data) > MAX_ARCHIVE_BYTES:
            raise ArchiveError(f"the file is larger than {MAX_ARCHIVE_BYTES // 2**20} MiB; not a run archive")
        return io.BytesIO(data)  # shares the bytes' memory until written to
    if isinstance(source, str | os.PathLike):
        try:
            return open_regular_file(source, limit=MAX_ARCHIVE_BYTES, what="run archive")
        except InputError as exc:
            raise ArchiveError(str(exc)) from None
    if hasattr(source, "read") and hasattr(source, "seek"):
        source.seek(0)
        return source
    raise ArchiveError(f"cannot read an archive from a {type(source).__name__}")


def open_zip(file: BinaryIO) -> zipfile.ZipFile:
    """The zip archive that `file` holds (its central directory read, nothing inflated)."""
    file.seek(0, io.SEEK_END)
    size = file.tell()
    file.seek(0)
    if size == 0:
        raise ArchiveError("the file is empty; a run archive is a zip file")
    try:
        return zipfile.ZipFile(file)
    except ZIP_ERRORS as exc:
        raise ArchiveError(f"not a readable zip archive ({type(exc).__name__}: {exc})") from None


def check_directory(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Member name → its entry, once the directory is checked: only the members of a run archive, each
    once, unencrypted, stored or deflated, within `MAX_MEMBERS` and `MAX_TOTAL_BYTES` declared."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ArchiveError(f"{len(infos)} members; at most {MAX_MEMBERS} are allowed")
    declared, allowed = sum(i.file_size for i in infos), archive_format.MAX_TOTAL_BYTES
    if declared > allowed:
        raise ArchiveError(f"members declare {declared} bytes uncompressed; at most {allowed} allowed")
    out: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        if name == "metrics/" and info.is_dir():
            continue
        if name not in FIXED_MEMBERS and not METRICS_MEMBER.fullmatch(name):
            raise ArchiveError(
                f"unexpected member {name!r:.120}: an archive holds manifest.json, runs.json, "
                "sweeps.json and metrics/<run id>.csv only"
            )
        if name in out:
            raise ArchiveError(f"{name}: appears twice in the archive")
        if info.flag_bits & 0x1:
            raise ArchiveError(f"{name}: encrypted; a run archive is not")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ArchiveError(f"{name}: compression method {info.compress_type}; only stored or deflated are read")
        out[name] = info
    for required in ("manifest.json", "runs.json"):
        if required not in out:
            raise ArchiveError(f"{required}: missing; this is not a run archive")
    return out


def member_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """A small member whole (at most `limit` bytes), checked against its declared size."""
    name = info.filename
    if info.file_size > limit:
        raise ArchiveError(f"{name}: {info.file_size:,} bytes; at most {limit:,} are read")
    try:
        with archive.open(info) as member:
            content = member.read(info.file_size + 1)
    except ZIP_ERRORS as exc:
        raise ArchiveError(f"not a readable zip archive ({type(exc).__name__}: {exc})") from None
    if len(content) != info.file_size:
        raise ArchiveError(f"{name}: holds {len(content)} bytes, declares {info.file_size}")
    return content


def member_text(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[str]:
    """A member's text in chunks (of at most `CHUNK_CHARACTERS` bytes), checked as UTF-8 and against its
    declared size."""
    name = info.filename
    decoder = codecs.getincrementaldecoder("utf-8")()
    read = 0
    try:
        with archive.open(info) as member:
            while chunk := member.read(min(CHUNK_CHARACTERS, info.file_size + 1 - read)):
                read += len(chunk)
                if read > info.file_size:
                    break
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ArchiveError(f"{name}: not UTF-8 text") from None
    except ZIP_ERRORS as exc:
        raise ArchiveError(f"not a readable zip archive ({type(exc).__name__}: {exc})") from None
    if read != info.file_size:
        raise ArchiveError(f"{name}: holds {read} bytes, declares {info.file_size}")

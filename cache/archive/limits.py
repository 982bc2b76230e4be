"""Reading what a user or an archive hands over: files by path and JSON text, defensively.

- `open_regular_file` opens a path only if it is a regular file, without ever blocking (a FIFO would
  block `open` until a writer comes; `/dev/zero` never ends), and refuses one larger than a limit;
- `read_regular_file` reads such a file whole, never more than the limit even if it grows meanwhile;
- `strict_json` parses JSON that never repeats an object key (the last would silently win) and
  whose integers have at most `MAX_INTEGER_DIGITS` digits (Python refuses 4,300 only after the work).

Each error is an `InputError` whose message names the file (or member) and the problem, never
echoing more than a few dozen characters of the input.
"""

import json
import os
import stat
from typing import Any, BinaryIO

MAX_INTEGER_DIGITS = 100  # any integer the lab reads (a seed, a step count) has far fewer
MAX_SHOWN_PATH = 160  # characters of a path in a message: its start and its end
KINDS = {
    stat.S_ISDIR: "a directory",
    stat.S_ISFIFO: "a FIFO (named pipe)",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
}


class InputError(ValueError):
    """An input file or text cannot be read as asked; the message names it and says why."""


def shown_path(path: str | os.PathLike) -> str:
    """A path as a message shows it: whole up to `MAX_SHOWN_PATH` characters, else its start and end."""
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if len(name) <= MAX_SHOWN_PATH:
        return name
    keep = MAX_SHOWN_PATH // 2
    return f"{name[:keep]}…({len(name) - 2 * keep:,} characters)…{name[-keep:]}"


def _kind(mode: int) -> str:
    return next((name for test, name in KINDS.items() if test(mode)), "not a regular file")


def open_regular_file(path: str | os.PathLike, *, limit: int, what: str) -> BinaryIO:
    """`path` opened for binary reading, if it is a regular file of at most `limit` bytes."""
    name, shown = os.fspath(path), shown_path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(name, flags)
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the path
        reason = getattr(exc, "strerror", None) or str(exc)[:80]
        raise InputError(f"{shown}: cannot read {what} ({reason})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{shown}: is {_kind(info.st_mode)}, not a {what} file")
        if info.st_size > limit:
            raise InputError(f"{shown}: {info.st_size:,} bytes, larger than the {limit:,} a {what} may have")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | os.PathLike, *, limit: int, what: str) -> bytes:
    """The whole content of the regular file `path`, at most `limit` bytes (`InputError` otherwise)."""
    with open_regular_file(path, limit=limit, what=what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise InputError(f"{shown_path(path)}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(f"{shown_path(path)}: grew beyond the {limit:,} bytes a {what} may have while being read")
    return data


def read_limited(handle: BinaryIO, *, limit: int, where: str, what: str) -> bytes:
    """At most `limit` bytes from an open stream (stdin, an upload), `InputError` if it holds more."""
    data = handle.read(limit + 1)
    if not isinstance(data, bytes):
        raise InputError(f"{where}: must be read as bytes (open it in binary mode)")
    if len(data) > limit:
        raise InputError(f"{where}: larger than the {limit:,} bytes a {what} may have")
    return data


def _bounded_int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INTEGER_DIGITS:
        raise InputError(
            f"an integer of {len(text) - text.startswith('-'):,} digits; at most {MAX_INTEGER_DIGITS} are read"
        )
    return int(text)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise InputError(f"an object repeats the key {json.dumps(repeated)[:80]}; each key may appear once")
    return obj


def strict_decoder() -> json.JSONDecoder:
    """The decoder of `strict_json`, for parsing a stream piece by piece (`raw_decode`); its hooks raise
    `InputError` without a location, which the caller adds."""
    return json.JSONDecoder(object_pairs_hook=_unique, parse_int=_bounded_int)


def strict_json(text: str | bytes, *, where: str) -> Any:
    """The JSON value of `text`, refusing repeated keys and huge integers; NaN and ±Infinity are
    parsed (the fields that cannot hold them refuse them by name). `where` prefixes every message."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{where}: not UTF-8 text (byte {exc.start + 1})") from None
    try:
        return strict_decoder().decode(text)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None

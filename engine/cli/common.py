"""What every command shares: the error type, JSON output and reading JSON input files."""

import argparse
import json
from collections.abc import Callable
from typing import Any

from cache.archive.limits import InputError, read_limited, read_regular_file, shown_path, strict_json
from engine.privacy.limits import NumberRange, brief

MAX_INPUT_BYTES = 10 * 1024 * 1024  # a spec or grid spec file; anything larger is not a spec


class CliError(Exception):
    """A command-line argument or input file is unusable; the message says which and why."""


def emit(obj: Any) -> None:
    print(json.dumps(obj), flush=True)


def read_json_file(path: str, *, what: str) -> Any:
    """A JSON document from `path` ("-" for stdin), with an error naming the file and the problem. Only a
    regular file is read (never a FIFO or a device), at most `MAX_INPUT_BYTES`; an object may not repeat
    a key (`cache.archive.limits.strict_json`)."""
    import sys

    try:
        if path == "-":
            data = read_limited(sys.stdin.buffer, limit=MAX_INPUT_BYTES, where="standard input", what=what)
        else:
            data = read_regular_file(path, limit=MAX_INPUT_BYTES, what=what)
        if not data.strip():
            raise CliError(f"{shown_path(path)}: empty file; a {what} is a JSON object")
        return strict_json(data, where="standard input" if path == "-" else shown_path(path))
    except InputError as exc:
        raise CliError(str(exc)) from None


def bounded(allowed: NumberRange) -> Callable[[str], float | int]:
    """An argparse type: the argument as a number in `allowed`, else an error naming the allowed range
    (NaN, ±inf and numbers beyond it are refused before any work is done with them)."""

    def parse(text: str) -> float | int:
        try:
            value: Any = int(text) if allowed.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {allowed.describe()}, got {brief(text)}") from None
        if (problem := allowed.problem(value)) is not None:
            raise argparse.ArgumentTypeError(problem)
        return allowed.convert(value)

    return parse

"""What every command shares: the error type, JSON output and reading JSON input files."""

import json
from pathlib import Path
from typing import Any

MAX_INPUT_BYTES = 10 * 1024 * 1024  # a spec or grid spec file; anything larger is not a spec


class CliError(Exception):
    """A command-line argument or input file is unusable; the message says which and why."""


def emit(obj: Any) -> None:
    print(json.dumps(obj), flush=True)


def read_json_file(path: str, *, what: str) -> Any:
    """A JSON document from `path` ("-" for stdin), with an error naming the file and the problem."""
    try:
        if path == "-":
            import sys

            text = sys.stdin.read(MAX_INPUT_BYTES + 1)
        else:
            file = Path(path)
            if file.is_dir():
                raise CliError(f"{path}: is a directory, not a {what} file")
            if file.stat().st_size > MAX_INPUT_BYTES:
                raise CliError(f"{path}: larger than {MAX_INPUT_BYTES // 2**20} MiB; not a {what}")
            text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: cannot read {what} ({exc.strerror})") from exc
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text; a {what} is a JSON file") from None
    if len(text) > MAX_INPUT_BYTES:
        raise CliError(f"{path}: larger than {MAX_INPUT_BYTES // 2**20} MiB; not a {what}")
    if not text.strip():
        raise CliError(f"{path}: empty file; a {what} is a JSON object")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except RecursionError:
        raise CliError(f"{path}: JSON nested too deeply") from None

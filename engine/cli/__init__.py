"""`python -m engine`: the command line of the engine and its jobs.

- runs: train, submit, sweep, worker, runs, show, cancel (`run_commands`);
- the store: export, import, delete, gc, size (`store_commands`);
- privacy: epsilon, calibrate (`privacy_commands`); the catalogue: algorithms, datasets, baseline.

The composition root of the engine: the only module that wires training, jobs and the store
together for a terminal user. An error prints one line naming the problem (with `--json`, also a
JSON object `{"error": ...}` on stdout) and exits with status 2; nothing is written to the store. Any
other exception is a bug, never a user's fault: it too ends as one line (`error: internal error: ...`),
with exit status 1, and never as a traceback. A message is one line of at most `MAX_MESSAGE` characters.
"""

import argparse
import sys

from cache import Store, StoreError, store_path
from cache.archive.format import ArchiveError
from cache.archive.limits import InputError
from engine.cli import catalog_commands, privacy_commands, run_commands, store_commands
from engine.cli.common import CliError, emit
from engine.jobs.settings import SettingError
from engine.privacy import PrivacyError
from engine.training import DatasetError, SpecError

__all__ = ["CliError", "build_parser", "main"]
EXPECTED_ERRORS = (CliError, SpecError, DatasetError, PrivacyError, StoreError, SettingError, ArchiveError, InputError)
MAX_MESSAGE = 1000  # characters of an error message: its start and, past the cut, its length


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits with status 2 through `main` (and as JSON with --json)."""

    def error(self, message: str):
        raise CliError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m engine", description="DP lab engine")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in (run_commands, store_commands, privacy_commands, catalog_commands):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        store = Store(store_path()) if args.needs_store else None
        args.func(args, store)
    except EXPECTED_ERRORS as exc:
        return report(exc, wants_json=wants_json, status=2)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, or a failure of the machine (out of memory): one line, no traceback
        return report(exc, wants_json=wants_json, status=1, prefix="internal error: ")
    return 0


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` on one line and at most about `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}… ({len(flat) - limit:,} more characters)"


def report(exc: BaseException, *, wants_json: bool, status: int, prefix: str = "") -> int:
    detail = str(exc) if status == 2 else f"{type(exc).__name__}: {exc}"
    message = one_line(prefix + detail)
    print(f"error: {message}", file=sys.stderr, flush=True)
    if wants_json:
        emit({"error": message, "kind": type(exc).__name__})
    return status

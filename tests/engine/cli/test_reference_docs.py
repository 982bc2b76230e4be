"""The reference pages say what the code does: `docs/reference/cli.md` names every command and flag of
`engine.cli.build_parser()` and nothing else; `docs/reference/spec-keys.md` names every key the spec, its nested
objects, the job options and grid specs know, with the ranges, choices and algorithms of the code's tables; and
every `python -m engine COMMAND` written in the project's Markdown is a real command."""

import argparse
import re
from collections.abc import Iterable

import pytest

from engine.cli import build_parser
from engine.jobs.options import JOB_KEYS, ON_WORKER_LOST
from engine.jobs.search import SEARCH_KEYS
from engine.jobs.sweep import SWEEP_KEYS
from engine.privacy.selection import TrialDistribution
from engine.training.algorithms.optimizers import OptimizerName
from engine.training.config.audit import AUDIT_KINDS
from engine.training.config.keys import (
    ALGORITHMS,
    ALL_KEYS,
    ANISO_GRANULARITIES,
    CALIBRATION_ACCOUNTANTS,
    CLIPPING_MODES,
    FEATURES,
    KEYS_BY_ALGORITHM,
    LEARNER_MODELS,
    NOISE_MODES,
    RANGES,
    Algorithm,
)
from engine.training.config.schedules import FIELDS, ScheduleKind
from engine.training.datasets.tabular_csv import SCHEMA_KEYS
from tests.helpers import ROOT

CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
SPEC_PAGE = ROOT / "docs" / "reference" / "spec-keys.md"
FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")
COMMAND_HEADING = re.compile(r"^### `([a-z][a-z-]*)`$")
CODE = re.compile(r"`([^`]+)`")
ENGINE_COMMAND = re.compile(r"python -m engine ((?:[a-z][a-z_-]*\|)*[a-z][a-z_-]*)")


def sections(text: str, level: str) -> dict[str, str]:
    """The text under each heading of `level` ("##" or "###"), up to the next heading."""
    out: dict[str, str] = {}
    title = None
    for line in text.splitlines():
        hashes = line.split(" ", 1)[0]
        if set(hashes) == {"#"}:
            title = line[len(hashes) + 1 :].strip() if len(hashes) == len(level) else None
            if title is not None:
                out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row of `text` but the header and the separator."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in text.splitlines()]
    rows = [row for line, row in zip(text.splitlines(), rows, strict=True) if line.startswith("| ")]
    return [row for row in rows if not set(row[0]) <= {"-", " "} and row[0] not in ("argument", "key", "field")]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The flags a user can type (hidden ones, `help=argparse.SUPPRESS`, and -h/--help left out)."""
    return {
        flag
        for action in parser._actions
        if action.option_strings
        and action.help is not argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction)
        for flag in action.option_strings
    }


def flags_in_code(text: str) -> set[str]:
    """The flags written in the code spans of `text` (the interpreter's `python -m` is no flag of ours)."""
    return set(FLAG.findall(" ".join(CODE.findall(text.replace("python -m ", "")))))


def documented_commands() -> dict[str, str]:
    text = CLI_PAGE.read_text()
    return {
        match.group(1): body
        for heading, body in sections(text, "###").items()
        if (match := COMMAND_HEADING.match(f"### {heading}"))
    }


def test_the_cli_page_has_a_section_for_every_command_and_no_other():
    assert set(documented_commands()) == set(subcommands())


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_the_cli_page_documents_every_flag_of_each_command_and_no_other(command):
    body = documented_commands().get(command, "")
    in_table = {flag for row in table_rows(body) for flag in flags_in_code(row[0])}
    assert in_table == parser_flags(subcommands()[command])
    mentioned = flags_in_code(body)
    assert mentioned <= parser_flags(subcommands()[command]) | {"-"}, "a flag of another command in its section"


def test_every_flag_the_cli_page_mentions_is_a_real_flag():
    every = set().union(*(parser_flags(p) for p in subcommands().values()))
    mentioned = flags_in_code(CLI_PAGE.read_text())
    assert mentioned <= every | {"-", "--help"}


def markdown_files() -> list:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in pages if page.exists()]


def test_every_engine_command_written_in_the_docs_exists():
    real = set(subcommands())
    named = {
        f"{page.relative_to(ROOT)}: {name}"
        for page in markdown_files()
        for match in ENGINE_COMMAND.finditer(page.read_text())
        for name in match.group(1).split("|")
        if name not in real
    }
    assert not named, named


# ------------------------------------------------------------------ spec keys

GROUPS = {
    "all": set(Algorithm),
    "gradient": {a for a in Algorithm if not a.learner},
    "private gradient": {a for a in Algorithm if a.private and not a.learner},
    "learners": set(LEARNER_MODELS),
}
CHOICES: dict[str, Iterable[str]] = {
    "algorithm": ALGORITHMS,
    "features": FEATURES,
    "noise": NOISE_MODES,
    "calibration_accountant": CALIBRATION_ACCOUNTANTS,
    "clipping": [mode for modes in CLIPPING_MODES.values() for mode in modes],
    "aniso_granularity": ANISO_GRANULARITIES,
    "optimizer": [name.value for name in OptimizerName],
}


def spec_tables() -> dict[str, dict[str, list[str]]]:
    """Each table of the spec keys page by its heading: the key of each row → the row's cells."""
    page = SPEC_PAGE.read_text()
    tables = sections(page, "##") | sections(page, "###")
    return {title: {row[0].strip("`"): row for row in table_rows(body)} for title, body in tables.items()}


def interval(allowed) -> str:
    left, right = "(" if allowed.low_open else "[", ")" if allowed.high_open else "]"
    low, high = (int(allowed.low), int(allowed.high)) if allowed.integer else (f"{allowed.low:g}", f"{allowed.high:g}")
    return f"{left}{low}, {high}{right}"


@pytest.mark.parametrize(
    ("title", "keys"),
    [
        ("Run spec keys", ALL_KEYS),
        ("Schedules", ["kind", *{field for fields in FIELDS.values() for field in fields}]),
        ("Audit", ["canaries", "kind"]),
        ("CSV schema", SCHEMA_KEYS),
        ("Job options", JOB_KEYS),
        ("Grid specs (sweep)", SWEEP_KEYS),
        ("Private search", SEARCH_KEYS),
    ],
)
def test_the_spec_keys_page_documents_every_key_and_no_other(title, keys):
    assert set(spec_tables().get(title, {})) == set(keys)


def test_each_run_spec_key_is_documented_with_its_algorithms_range_and_choices():
    rows = spec_tables()["Run spec keys"]
    for key, (_, algorithms, allowed, *_) in rows.items():
        named: set[Algorithm] = set()
        for part in (p.strip() for p in algorithms.split(",")):
            named |= GROUPS[part] if part in GROUPS else {Algorithm(CODE.fullmatch(part).group(1))}
        assert named == {a for a, keys in KEYS_BY_ALGORITHM.items() if key in keys}, key
        if key in RANGES:
            assert interval(RANGES[key]) in allowed, key
        assert set(CHOICES.get(key, ())) <= set(CODE.findall(allowed)), key


def test_the_nested_objects_are_documented_with_their_choices():
    tables = spec_tables()
    allowed = {
        "kind": ([k.value for k in ScheduleKind], tables["Schedules"]["kind"][2]),
        "audit kind": (AUDIT_KINDS, tables["Audit"]["kind"][1]),
        "on_worker_lost": (ON_WORKER_LOST, tables["Job options"]["on_worker_lost"][1]),
        "distribution": ([d.value for d in TrialDistribution], tables["Private search"]["distribution"][1]),
    }
    for name, (choices, cell) in allowed.items():
        assert set(choices) <= set(CODE.findall(cell)), name

"""The run archive: a zip file that moves finished, failed and cancelled runs between stores.

Members (format "dplab-runs", version 1), JSON and numbers only, never pickle:

- `manifest.json`: format, format_version, created_at, engine_version (of the exporter), run_count,
  sweep_count, includes_metrics, and (written since the export of private diagnostics became an opt-in;
  optional, so older archives still read) private_diagnostics, whether the archive may hold values
  computed on the private training data that no ε covers, with privacy_note saying what that means.
  An archive without them is read as holding its runs' diagnostics whenever it includes metrics (what
  every export did before);
- `runs.json`: a list of run objects (id, cache_key, engine_version, status, spec, plan, result,
  error, created_at, started_at, finished_at, progress_step, total_steps, attempts, events, and, for a
  run its user named, that name: optional, so older archives still read);
- `metrics/<run id>.csv`: header `step,name,value`, one row per stored metric value;
- `sweeps.json` (optional): sweeps, each with its members (position, run_id, point).

Only terminal runs travel (queued and running runs belong to the store that runs them). Reading
(`cache.archive.reader`, a stream in bounded memory) is strict: anything unexpected raises
`ArchiveError` naming the member and the field, with the checks defined here. NaN is refused
everywhere; ±Infinity only inside plan, result and metric values (an accountant whose bound is
infinite), written as Python's json writes it. Metric rows come in (step, name) order.
"""

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cache.archive.csv_cells import METRIC_NAME
from cache.store.names import MAX_NAME_CHARS
from cache.store.records import TERMINAL, RunEvent, RunRecord, RunStatus

FORMAT_NAME = "dplab-runs"
FORMAT_VERSION = 1
MAX_ARCHIVE_BYTES = 512 * 2**20  # the zip file itself
MAX_TOTAL_BYTES = 512 * 2**20  # all members, uncompressed
MAX_MEMBERS = 100_003  # manifest, runs, sweeps and a metrics file per run
MAX_DEPTH = 64  # JSON nesting
MAX_TEXT = 1_000_000  # characters of one string (an error message, a privacy statement)
SAFE_ID = "[0-9A-Za-z][0-9A-Za-z_-]{0,63}"  # run and sweep ids: also file names inside the archive
METRICS_MEMBER = re.compile(f"metrics/({SAFE_ID})\\.csv")
CSV_HEADER = ["step", "name", "value"]
MetricRow = tuple[int, str, float]


class ArchiveError(ValueError):
    """The archive cannot be read or written; the message names the member and field."""


@dataclass(frozen=True, kw_only=True)
class ArchivedRun:
    """A terminal run as it travels: what it was asked, what it produced and its status history."""

    id: str
    cache_key: str
    engine_version: str
    status: RunStatus
    spec: dict[str, Any]
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    progress_step: int
    total_steps: int | None
    attempts: int
    events: tuple[RunEvent, ...] = ()
    name: str | None = None  # the name its user gave it: a label, never part of what it computed

    @classmethod
    def from_record(cls, run: RunRecord, events: Sequence[RunEvent], name: str | None = None) -> "ArchivedRun":
        return cls(**{k: getattr(run, k) for k in RUN_FIELDS if k != "events"}, events=tuple(events), name=name)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in RUN_FIELDS if k != "events"} | {"status": self.status.value}
        events = [
            {"seq": e.seq, "at": e.at, "status": e.status.value, "worker": e.worker, "detail": e.detail}
            for e in self.events
        ]
        return out | {"events": events} | ({"name": self.name} if self.name else {})


@dataclass(frozen=True, kw_only=True)
class SweepMember:
    position: int  # in the sweep's grid order
    run_id: str
    point: dict[str, Any]  # the grid point (parameter values and seed)


@dataclass(frozen=True, kw_only=True)
class ArchivedSweep:
    id: str
    name: str | None
    spec: dict[str, Any]
    created_at: float
    members: tuple[SweepMember, ...]  # only members whose run is in the archive

    def to_json(self) -> dict[str, Any]:
        members = [{"position": m.position, "run_id": m.run_id, "point": m.point} for m in self.members]
        return {"id": self.id, "name": self.name, "spec": self.spec, "created_at": self.created_at, "members": members}


@dataclass(frozen=True, kw_only=True)
class Archive:
    """The whole archive, decoded. `metrics` maps a run id to its (step, name, value) rows."""

    engine_version: str  # of the engine that exported it
    runs: tuple[ArchivedRun, ...]
    metrics: Mapping[str, Sequence[MetricRow]] = field(default_factory=dict)
    sweeps: tuple[ArchivedSweep, ...] = ()
    includes_metrics: bool = True
    created_at: float = field(default_factory=time.time)
    private_diagnostics: bool = True  # may hold values computed on private training data (the exporter says)
    privacy_note: str = ""  # what `private_diagnostics` means for this archive, in words

    def manifest(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "created_at": self.created_at,
            "engine_version": self.engine_version,
            "run_count": len(self.runs),
            "sweep_count": len(self.sweeps),
            "includes_metrics": self.includes_metrics,
            "private_diagnostics": self.private_diagnostics,
            "privacy_note": self.privacy_note,
        }


# ---------------------------------------------------------------------------------------- checks


def check_run(raw: Any, where: str) -> ArchivedRun:
    """A run object of runs.json, checked field by field."""
    if isinstance(raw, dict) and "id" in raw:
        where = f"{where} (id {_id(raw['id'], f'{where}: id')})"
    obj = check_fields(raw, where, RUN_FIELDS, RUN_OPTIONAL)
    seqs = [e["seq"] for e in obj["events"]]
    if seqs != sorted(set(seqs)):
        raise ArchiveError(f"{where}: events: seq must increase from one event to the next; got {seqs[:20]}")
    events = tuple(RunEvent(run_id=obj["id"], **e) for e in obj["events"])
    return ArchivedRun(**obj | {"events": events})


def check_sweep(raw: Any, where: str, run_ids: set[str]) -> ArchivedSweep:
    """A sweep object of sweeps.json, checked; its members must be runs of `run_ids`."""
    if isinstance(raw, dict) and "id" in raw:
        where = f"{where} (id {_id(raw['id'], f'{where}: id')})"
    obj = check_fields(raw, where, SWEEP_FIELDS)
    members = tuple(SweepMember(**m) for m in obj["members"])
    if not members:
        raise ArchiveError(f"{where}: members is empty; an archived sweep holds at least one of its runs")
    if unknown := [m.run_id for m in members if m.run_id not in run_ids]:
        raise ArchiveError(f"{where}: members: run {unknown[0]!r} is not in runs.json")
    if len({m.position for m in members}) != len(members):
        raise ArchiveError(f"{where}: members: two members share a position")
    return ArchivedSweep(**obj | {"members": members})


STEP_TEXT = re.compile(r"[0-9]{1,15}").fullmatch


def metric_row(row: list[str]) -> MetricRow:
    """A metrics CSV row (step, name, value), checked; `ArchiveError` says what is wrong (the caller adds
    where: this runs once per row of archives with millions of them)."""
    if len(row) != 3:
        raise ArchiveError(f"expected 3 fields (step,name,value); got {len(row)}")
    step, metric, value = row
    if not STEP_TEXT(step):
        raise ArchiveError(f"step must be an integer in [0, 10^15); got {step!r:.40}")
    if not METRIC_NAME.fullmatch(metric):
        raise ArchiveError(
            f"name must be a metric name of the lab (1 to 64 lowercase letters, digits or '_', starting with a "
            f"letter, such as epsilon_pld); got {metric!r:.80}"
        )
    try:
        number = float(value)
    except ValueError:
        raise ArchiveError(f"value must be a number; got {value!r:.40}") from None
    if number != number:
        raise ArchiveError("value is NaN; a metric value is a number")
    return int(step), metric, number


# ---------------------------------------------------------------------------------------- field checks

Check = Callable[[Any, str], Any]


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def check_fields(
    raw: Any, where: str, checks: Mapping[str, Check], optional: Mapping[str, Check] | None = None
) -> dict[str, Any]:
    """An object with every key of `checks` and any of `optional`, and no other, each value checked (and
    converted) by its check."""
    if not isinstance(raw, dict):
        raise ArchiveError(f"{where}: must be an object, got {_kind(raw)}")
    if missing := [k for k in checks if k not in raw]:
        raise ArchiveError(f"{where}: missing field {missing[0]!r}")
    allowed = {**checks, **(optional or {})}
    if unknown := sorted(set(raw) - set(allowed)):
        raise ArchiveError(f"{where}: unknown field {unknown[0]!r:.80}; allowed: {', '.join(allowed)}")
    return {key: check(raw[key], f"{where}: {key}") for key, check in allowed.items() if key in raw}


def _nullable(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(SAFE_ID, value):
        raise ArchiveError(
            f"{where}: must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit; got {value!r:.80}"
        )
    return value


def _status(value: Any, where: str, *, allowed: tuple[RunStatus, ...] = tuple(RunStatus)) -> RunStatus:
    if value not in [s.value for s in allowed]:
        extra = " (queued and running runs are not archived)" if allowed == TERMINAL else ""
        raise ArchiveError(f"{where}: must be one of {', '.join(s.value for s in allowed)}{extra}; got {value!r:.80}")
    return RunStatus(value)


def _text(value: Any, where: str, *, shortest: int = 1, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not shortest <= len(value) <= limit:
        got = f"{len(value)} characters" if isinstance(value, str) else _kind(value)
        raise ArchiveError(f"{where}: must be a string of {shortest} to {limit} characters; got {got}")
    _encodable(value, where)
    return value


def _encodable(value: str, where: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ArchiveError(f"{where}: holds an unpaired surrogate (not valid Unicode text)") from None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ArchiveError(f"{where}: must be a finite number >= 0; got {value!r:.80}")
    return float(value)


EARLIEST_TIME = 946_684_800.0  # 2000-01-01 00:00 UTC: no run of the lab is older
LATEST_AHEAD_S = 86_400.0  # a time may be at most a day ahead of this machine's clock
YEAR_S = 31_556_952.0  # a Gregorian year, for showing a time no calendar function holds


def year_of(at: float) -> str:
    """The year a time (seconds since 1970) falls in, for a message."""
    try:
        year = time.gmtime(at).tm_year
    except (OverflowError, OSError, ValueError):
        year = round(1970 + at / YEAR_S)
    return f"{year:,}" if abs(year) > 9999 else str(year)


def check_time(at: float, where: str) -> None:
    """Refuse a time (seconds since 1970) before 2000-01-01 or more than a day from now."""
    if not EARLIEST_TIME <= at <= time.time() + LATEST_AHEAD_S:
        raise ArchiveError(
            f"{where}: {at!r:.40} is in the year {year_of(at)}; a time must lie between 2000-01-01 and a day from "
            "now (seconds since 1970)"
        )


def _time(value: Any, where: str) -> float:
    """A time in seconds since 1970, between 2000-01-01 and a day from now (`check_time`)."""
    at = _number(value, where)
    check_time(at, where)
    return at


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise ArchiveError(f"{where}: must be an integer in [0, 2^53); got {value!r:.80}")
    return value


def _tree(value: Any, where: str, *, allow_inf: bool = False) -> dict[str, Any]:
    """A JSON object of strings, finite numbers (±Infinity if `allow_inf`), booleans, null, lists, objects."""
    if not isinstance(value, dict):
        raise ArchiveError(f"{where}: must be an object; got {_kind(value)}")

    def check(node: Any, path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ArchiveError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict | list):
            for key, item in node.items() if isinstance(node, dict) else enumerate(node):
                if isinstance(key, str):
                    _encodable(key, path)
                check(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]", depth + 1)
        elif isinstance(node, str):
            _encodable(node, path)
        elif isinstance(node, float) and not (math.isfinite(node) or (allow_inf and math.isinf(node))):
            raise ArchiveError(f"{path}: {json.dumps(node)} is not allowed here; only finite numbers")
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) >= 2**63:
            raise ArchiveError(f"{path}: integer {node} does not fit in 64 bits")

    check(value, where, 0)
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ArchiveError(f"{where}: must be true or false; got {_kind(value)}")
    return value


def _list(value: Any, where: str, *, item: Check) -> list[Any]:
    if not isinstance(value, list):
        raise ArchiveError(f"{where}: must be a list; got {_kind(value)}")
    return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]


_tiny_text = partial(_text, limit=256)
_any_text = _nullable(partial(_text, shortest=0))
EVENT_FIELDS: dict[str, Check] = {
    "seq": _int,
    "at": _number,
    "status": _status,
    "worker": _any_text,
    "detail": _any_text,
}
_numbers = _nullable(partial(_tree, allow_inf=True))  # plans and results: ±Infinity allowed
RUN_FIELDS: dict[str, Check] = {
    "id": _id,
    "cache_key": _tiny_text,
    "engine_version": _tiny_text,
    "status": partial(_status, allowed=TERMINAL),
    "spec": _tree,
    "plan": _numbers,
    "result": _numbers,
    "error": _any_text,
    "created_at": _number,
    "started_at": _nullable(_number),
    "finished_at": _nullable(_number),
    "progress_step": _int,
    "total_steps": _nullable(_int),
    "attempts": _int,
    "events": partial(_list, item=partial(check_fields, checks=EVENT_FIELDS)),
}
RUN_OPTIONAL: dict[str, Check] = {"name": partial(_text, limit=MAX_NAME_CHARS)}
MEMBER_FIELDS: dict[str, Check] = {"position": _int, "run_id": _id, "point": _tree}
SWEEP_FIELDS: dict[str, Check] = {
    "id": _id,
    "name": _nullable(partial(_text, shortest=0, limit=1000)),
    "spec": _tree,
    "created_at": _time,
    "members": partial(_list, item=partial(check_fields, checks=MEMBER_FIELDS)),
}
MANIFEST_FIELDS: dict[str, Check] = {
    "format": _tiny_text,
    "format_version": _int,
    "created_at": _time,
    "engine_version": _tiny_text,
    "run_count": _int,
    "sweep_count": _int,
    "includes_metrics": _bool,
}
MANIFEST_OPTIONAL: dict[str, Check] = {
    "private_diagnostics": _bool,
    "privacy_note": partial(_text, shortest=0, limit=2000),
}

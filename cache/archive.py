"""The run archive: a zip file that moves finished, failed and cancelled runs between stores.

Members (format "dplab-runs", version 1), JSON and numbers only, never pickle:

- `manifest.json`: format, format_version, created_at, engine_version (of the exporter), run_count,
  sweep_count, includes_metrics;
- `runs.json`: a list of run objects (id, cache_key, engine_version, status, spec, plan, result,
  error, created_at, started_at, finished_at, progress_step, total_steps, attempts, events);
- `metrics/<run id>.csv`: header `step,name,value`, one row per stored metric value;
- `sweeps.json` (optional): sweeps, each with its members (position, run_id, point).

Only terminal runs travel (queued and running runs belong to the store that runs them). Reading
is strict: anything unexpected raises `ArchiveError` naming the member and the field, before a
caller touches a store. NaN is refused everywhere; ±Infinity only inside plan, result and metric
values (an accountant whose bound is infinite), written as Python's json writes it.
"""

import csv
import io
import json
import math
import os
import re
import struct
import time
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from cache.records import RunEvent, RunRecord, RunStatus

FORMAT_NAME = "dplab-runs"
FORMAT_VERSION = 1
MAX_ARCHIVE_BYTES = 512 * 2**20  # the zip file itself
MAX_TOTAL_BYTES = 512 * 2**20  # all members, uncompressed
MAX_MEMBERS = 100_003  # manifest, runs, sweeps and a metrics file per run
MAX_DEPTH = 64  # JSON nesting
MAX_TEXT = 1_000_000  # characters of one string (an error message, a privacy statement)
TERMINAL = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)
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

    @classmethod
    def from_record(cls, run: RunRecord, events: Sequence[RunEvent]) -> "ArchivedRun":
        return cls(**{k: getattr(run, k) for k in RUN_FIELDS if k != "events"}, events=tuple(events))

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in RUN_FIELDS if k != "events"} | {"status": self.status.value}
        events = [{"seq": e.seq, "at": e.at, "status": e.status.value, "worker": e.worker, "detail": e.detail}
                  for e in self.events]  # fmt: skip
        return out | {"events": events}


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

    def manifest(self) -> dict[str, Any]:
        return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "created_at": self.created_at,
                "engine_version": self.engine_version, "run_count": len(self.runs), "sweep_count": len(self.sweeps),
                "includes_metrics": self.includes_metrics}  # fmt: skip


# ---------------------------------------------------------------------------------------- writing


def write_archive(archive: Archive, path: Path | str | None = None) -> bytes:
    """The archive as zip bytes (also written to `path`, atomically, when given). It is validated
    exactly as `read_archive` would, so nothing is written that could not be read back."""
    members = {"manifest.json": _dumps(archive.manifest()), "runs.json": _dumps([r.to_json() for r in archive.runs])}
    if archive.sweeps:
        members["sweeps.json"] = _dumps([s.to_json() for s in archive.sweeps])
    for run_id, rows in archive.metrics.items():
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        writer.writerows((step, name, repr(float(value))) for step, name, value in rows)
        members[f"metrics/{run_id}.csv"] = text.getvalue().encode()
    total = sum(len(data) for data in members.values())
    if total > MAX_TOTAL_BYTES or len(members) > MAX_MEMBERS:
        raise ArchiveError(
            f"the export would hold {total / 2**20:.0f} MiB in {len(members)} files; the limit is "
            f"{MAX_TOTAL_BYTES // 2**20} MiB and {MAX_MEMBERS} files: export fewer runs"
        )
    _decode(members)  # the reader's checks, on exactly what is written
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    data = buffer.getvalue()
    if path is not None:
        target = Path(path)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.partial")
        temporary.write_bytes(data)
        temporary.replace(target)
    return data


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()


# ---------------------------------------------------------------------------------------- reading


def read_archive(source: bytes | bytearray | memoryview | str | os.PathLike | BinaryIO) -> Archive:
    """Decode and validate an archive from bytes, a path or a binary file object (an upload)."""
    return _decode(_members(_load(source)))


def _load(source: Any) -> bytes:
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    elif isinstance(source, str | os.PathLike):
        try:
            with open(source, "rb") as file:
                data = file.read(MAX_ARCHIVE_BYTES + 1)
        except OSError as exc:
            raise ArchiveError(f"{os.fspath(source)}: cannot read ({exc.strerror or exc})") from exc
    elif hasattr(source, "read"):
        data = source.read(MAX_ARCHIVE_BYTES + 1)
        if not isinstance(data, bytes):
            raise ArchiveError("the archive must be read as bytes (open it in binary mode)")
    else:
        raise ArchiveError(f"cannot read an archive from a {type(source).__name__}")
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ArchiveError(f"the file is larger than {MAX_ARCHIVE_BYTES // 2**20} MiB; not a run archive")
    if not data:
        raise ArchiveError("the file is empty; a run archive is a zip file")
    return data


def _members(data: bytes) -> dict[str, bytes]:
    """The members' bytes, after checking names, counts, declared and actual sizes (a zip bomb
    declares small sizes and inflates to more: reading stops at the declared size)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise ArchiveError(f"{len(infos)} members; at most {MAX_MEMBERS} are allowed")
            declared = sum(i.file_size for i in infos)
            if declared > MAX_TOTAL_BYTES:
                raise ArchiveError(f"members declare {declared} bytes uncompressed; at most {MAX_TOTAL_BYTES} allowed")
            out: dict[str, bytes] = {}
            for info in infos:
                if info.filename == "metrics/" and info.is_dir():
                    continue
                _check_member(info, out)
                with zf.open(info) as member:
                    content = member.read(info.file_size + 1)
                if len(content) != info.file_size:
                    raise ArchiveError(f"{info.filename}: holds {len(content)} bytes, declares {info.file_size}")
                out[info.filename] = content
            return out
    except ArchiveError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, struct.error, EOFError, OSError, ValueError,
            NotImplementedError, RuntimeError) as exc:  # fmt: skip
        raise ArchiveError(f"not a readable zip archive ({type(exc).__name__}: {exc})") from None


def _check_member(info: zipfile.ZipInfo, seen: Mapping[str, bytes]) -> None:
    name = info.filename
    if name not in ("manifest.json", "runs.json", "sweeps.json") and not METRICS_MEMBER.fullmatch(name):
        raise ArchiveError(f"unexpected member {name!r:.120}: an archive holds manifest.json, runs.json, "
                           "sweeps.json and metrics/<run id>.csv only")  # fmt: skip
    if name in seen:
        raise ArchiveError(f"{name}: appears twice in the archive")
    if info.flag_bits & 0x1:
        raise ArchiveError(f"{name}: encrypted; a run archive is not")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ArchiveError(f"{name}: compression method {info.compress_type}; only stored or deflated are read")


def _decode(members: Mapping[str, bytes]) -> Archive:
    for required in ("manifest.json", "runs.json"):
        if required not in members:
            raise ArchiveError(f"{required}: missing; this is not a run archive")
    manifest = _manifest(_json(members, "manifest.json"))
    runs = tuple(_list(_json(members, "runs.json"), "runs.json: runs", item=_run))
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):
        raise ArchiveError(f"runs.json: run id {next(i for i in ids if ids.count(i) > 1)!r} appears more than once")
    metrics = {}
    for name, data in members.items():
        if (match := METRICS_MEMBER.fullmatch(name)) is not None:
            if match[1] not in ids:
                raise ArchiveError(f"{name}: metrics for run {match[1]!r}, which is not in runs.json")
            metrics[match[1]] = _metric_rows(name, data)
    sweeps_raw = _json(members, "sweeps.json") if "sweeps.json" in members else []
    sweeps = tuple(_list(sweeps_raw, "sweeps.json: sweeps", item=partial(_sweep, run_ids=set(ids))))
    if len({s.id for s in sweeps}) != len(sweeps):
        raise ArchiveError("sweeps.json: a sweep id appears more than once")
    for key, count in (("run_count", len(runs)), ("sweep_count", len(sweeps))):
        if manifest[key] != count:
            raise ArchiveError(f"manifest.json: {key} is {manifest[key]} but the archive holds {count}")
    return Archive(engine_version=manifest["engine_version"], runs=runs, metrics=metrics, sweeps=sweeps,
                   includes_metrics=manifest["includes_metrics"], created_at=manifest["created_at"])  # fmt: skip


def _json(members: Mapping[str, bytes], name: str) -> Any:
    def unique(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in items}) != len(items):
            raise ArchiveError(f"{name}: an object repeats a key ({sorted(k for k, _ in items)})"[:300])
        return dict(items)

    try:
        return json.loads(members[name].decode("utf-8"), object_pairs_hook=unique)  # NaN, ±Infinity: field checks
    except UnicodeDecodeError:
        raise ArchiveError(f"{name}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ArchiveError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ArchiveError(f"{name}: JSON nested too deeply") from None


def _manifest(raw: Any) -> dict[str, Any]:
    obj = _fields(raw, "manifest.json", MANIFEST_FIELDS)
    if obj["format"] != FORMAT_NAME:
        raise ArchiveError(f"manifest.json: format must be {FORMAT_NAME!r}; got {obj['format']!r}")
    if (version := obj["format_version"]) != FORMAT_VERSION:
        newer = " (written by a newer DP lab)" if version > FORMAT_VERSION else ""
        raise ArchiveError(f"manifest.json: format_version {version}{newer}; this engine reads {FORMAT_VERSION}")
    return obj


def _run(raw: Any, where: str) -> ArchivedRun:
    if isinstance(raw, dict) and "id" in raw:
        where = f"{where} (id {_id(raw['id'], f'{where}: id')})"
    obj = _fields(raw, where, RUN_FIELDS)
    seqs = [e["seq"] for e in obj["events"]]
    if seqs != sorted(set(seqs)):
        raise ArchiveError(f"{where}: events: seq must increase from one event to the next; got {seqs[:20]}")
    events = tuple(RunEvent(run_id=obj["id"], **e) for e in obj["events"])
    return ArchivedRun(**obj | {"events": events})


def _sweep(raw: Any, where: str, run_ids: set[str]) -> ArchivedSweep:
    if isinstance(raw, dict) and "id" in raw:
        where = f"{where} (id {_id(raw['id'], f'{where}: id')})"
    obj = _fields(raw, where, SWEEP_FIELDS)
    members = tuple(SweepMember(**m) for m in obj["members"])
    if not members:
        raise ArchiveError(f"{where}: members is empty; an archived sweep holds at least one of its runs")
    if unknown := [m.run_id for m in members if m.run_id not in run_ids]:
        raise ArchiveError(f"{where}: members: run {unknown[0]!r} is not in runs.json")
    if len({m.position for m in members}) != len(members):
        raise ArchiveError(f"{where}: members: two members share a position")
    return ArchivedSweep(**obj | {"members": members})


def _metric_rows(name: str, data: bytes) -> list[MetricRow]:
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""), strict=True)
        if (header := next(reader, None)) != CSV_HEADER:
            raise ArchiveError(f"{name}: the header must be {','.join(CSV_HEADER)}; got {header!r:.80}")
        rows, seen = [], set()
        for row in reader:
            rows.append(_metric_row(row, f"{name}: line {reader.line_num}"))
            if rows[-1][:2] in seen:
                raise ArchiveError(f"{name}: line {reader.line_num}: step {row[0]} of {row[1]!r} appears twice")
            seen.add(rows[-1][:2])
        return rows
    except UnicodeDecodeError:
        raise ArchiveError(f"{name}: not UTF-8 text") from None
    except csv.Error as exc:
        raise ArchiveError(f"{name}: line {reader.line_num}: not valid CSV ({exc})") from None


def _metric_row(row: list[str], where: str) -> MetricRow:
    if len(row) != 3:
        raise ArchiveError(f"{where}: expected 3 fields (step,name,value); got {len(row)}")
    step, metric, value = row
    if not re.fullmatch(r"[0-9]{1,15}", step):
        raise ArchiveError(f"{where}: step must be an integer in [0, 10^15); got {step!r:.40}")
    if not 1 <= len(metric) <= 200 or not metric.isprintable():
        raise ArchiveError(f"{where}: name must be 1 to 200 printable characters; got {metric!r:.80}")
    try:
        number = float(value)
    except ValueError:
        raise ArchiveError(f"{where}: value must be a number; got {value!r:.40}") from None
    if math.isnan(number):
        raise ArchiveError(f"{where}: value is NaN; a metric value is a number")
    return int(step), metric, number


# ---------------------------------------------------------------------------------------- field checks

Check = Callable[[Any, str], Any]


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _fields(raw: Any, where: str, checks: Mapping[str, Check]) -> dict[str, Any]:
    """An object with exactly the keys of `checks`, each value checked (and converted) by its check."""
    if not isinstance(raw, dict):
        raise ArchiveError(f"{where}: must be an object, got {_kind(raw)}")
    if missing := [k for k in checks if k not in raw]:
        raise ArchiveError(f"{where}: missing field {missing[0]!r}")
    if unknown := sorted(set(raw) - set(checks)):
        raise ArchiveError(f"{where}: unknown field {unknown[0]!r:.80}; allowed: {', '.join(checks)}")
    return {key: check(raw[key], f"{where}: {key}") for key, check in checks.items()}


def _nullable(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(SAFE_ID, value):
        raise ArchiveError(f"{where}: must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit; "
                           f"got {value!r:.80}")  # fmt: skip
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
EVENT_FIELDS: dict[str, Check] = {"seq": _int, "at": _number, "status": _status, "worker": _any_text,
                                  "detail": _any_text}  # fmt: skip
_numbers = _nullable(partial(_tree, allow_inf=True))  # plans and results: ±Infinity allowed
RUN_FIELDS: dict[str, Check] = {
    "id": _id, "cache_key": _tiny_text, "engine_version": _tiny_text, "status": partial(_status, allowed=TERMINAL),
    "spec": _tree, "plan": _numbers, "result": _numbers,
    "error": _any_text, "created_at": _number, "started_at": _nullable(_number),
    "finished_at": _nullable(_number), "progress_step": _int, "total_steps": _nullable(_int), "attempts": _int,
    "events": partial(_list, item=partial(_fields, checks=EVENT_FIELDS)),
}  # fmt: skip
MEMBER_FIELDS: dict[str, Check] = {"position": _int, "run_id": _id, "point": _tree}
SWEEP_FIELDS: dict[str, Check] = {"id": _id, "name": _nullable(partial(_text, shortest=0, limit=1000)), "spec": _tree,
                                  "created_at": _number,
                                  "members": partial(_list, item=partial(_fields, checks=MEMBER_FIELDS))}  # fmt: skip
MANIFEST_FIELDS: dict[str, Check] = {"format": _tiny_text, "format_version": _int, "created_at": _number,
                                     "engine_version": _tiny_text, "run_count": _int, "sweep_count": _int,
                                     "includes_metrics": _bool}  # fmt: skip

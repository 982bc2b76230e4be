"""Reading a run archive (`cache.archive.format` describes the format) as a stream, in bounded memory.

`ArchiveReader` checks the zip's directory first (member names, counts, declared sizes, encryption,
compression: nothing is inflated yet; `cache.archive.zip_members` reads the container) and reads the
manifest; then it yields the runs of `runs.json` one at a time, the rows of a run's `metrics/<id>.csv`
one at a time, and the sweeps. Memory stays at one run object, one CSV line and the set of run ids,
whatever the archive's size: `runs.json` and `sweeps.json` are JSON arrays decoded element by element
(an element may not exceed `MAX_ELEMENT_BYTES`), and metric rows must come in (step, name) order, which
the exporter writes and which makes a repeated row visible without remembering the rows before it.

Every check raises `ArchiveError` naming the member, the run and the field. The cross-member checks
(manifest counts, metrics and sweep members of runs that are not in `runs.json`, a finished run's metric
steps within its `total_steps`) complete when the stream that establishes them is consumed: `runs()` before
`metric_rows()` and `sweeps()`. The checks across one run's fields (`cache.archive.consistency`) are the
caller's, once it has checked the run's shape; `check_all` makes them.
"""

import csv
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from cache.archive.consistency import check_consistent, metric_step_limit, run_where
from cache.archive.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_FIELDS,
    MANIFEST_OPTIONAL,
    METRICS_MEMBER,
    Archive,
    ArchivedRun,
    ArchivedSweep,
    ArchiveError,
    MetricRow,
    check_fields,
    check_run,
    check_sweep,
    metric_row,
)
from cache.archive.limits import InputError, strict_decoder, strict_json
from cache.archive.zip_members import Source, check_directory, member_bytes, member_text, open_source, open_zip

MAX_ELEMENT_BYTES = 16 * 2**20  # one run or sweep object of runs.json / sweeps.json
MAX_METRIC_LINE = 4096  # characters: step (≤ 15 digits), name (≤ 200 characters), value
CSV_HEADER = "step,name,value"
NUMBER_CHARACTERS = "0123456789+-.eE"  # what may follow a number's text that the buffer ends with


class ArchiveReader(AbstractContextManager):
    """One pass over an archive. Use as a context manager; `runs()` first, then `metric_rows(id)` for
    any of the runs seen, then `sweeps()`."""

    def __init__(self, source: Source):
        self.file = open_source(source)
        self.closes_file = not hasattr(source, "read")
        try:
            self.zip = open_zip(self.file)
            self.infos = check_directory(self.zip)
            self.manifest = self._manifest()
        except BaseException:
            self.close()
            raise
        self.run_ids: set[str] = set()
        self.step_limits: dict[str, int] = {}  # run id → the last step its metric rows may have
        self.runs_read = False

    # ------------------------------------------------------------------ the manifest

    def _manifest(self) -> dict[str, Any]:
        try:
            member = member_bytes(self.zip, self.infos["manifest.json"], MAX_ELEMENT_BYTES)
            raw = strict_json(member, where="manifest.json")
        except InputError as exc:
            raise ArchiveError(str(exc)) from None
        obj = check_fields(raw, "manifest.json", MANIFEST_FIELDS, MANIFEST_OPTIONAL)
        obj.setdefault("private_diagnostics", obj["includes_metrics"])  # older exports carried every metric
        obj.setdefault("privacy_note", "")
        if obj["format"] != FORMAT_NAME:
            raise ArchiveError(f"manifest.json: format must be {FORMAT_NAME!r}; got {obj['format']!r:.80}")
        if (version := obj["format_version"]) != FORMAT_VERSION:
            newer = " (written by a newer DP lab)" if version > FORMAT_VERSION else ""
            raise ArchiveError(f"manifest.json: format_version {version}{newer}; this engine reads {FORMAT_VERSION}")
        return obj

    @property
    def engine_version(self) -> str:
        return self.manifest["engine_version"]

    @property
    def metric_members(self) -> dict[str, str]:
        """run id → its metrics member, for every metrics file in the archive."""
        return {m[1]: name for name in self.infos if (m := METRICS_MEMBER.fullmatch(name)) is not None}

    # ------------------------------------------------------------------ streams

    def _elements(self, name: str) -> Iterator[Any]:
        """The elements of the JSON array that member `name` holds, decoded one at a time."""
        yield from json_array(member_text(self.zip, self.infos[name]), where=name)

    def runs(self) -> Iterator[ArchivedRun]:
        """The runs of `runs.json`, each checked; at the end, the manifest's count and that every metrics
        file belongs to one of them."""
        self.run_ids, self.step_limits = set(), {}
        for index, raw in enumerate(self._elements("runs.json")):
            run = check_run(raw, f"runs.json: runs[{index}]")
            if run.id in self.run_ids:
                raise ArchiveError(f"runs.json: run id {run.id!r} appears more than once")
            self.run_ids.add(run.id)
            if (limit := metric_step_limit(run)) is not None:
                self.step_limits[run.id] = limit
            yield run
        if self.manifest["run_count"] != len(self.run_ids):
            raise ArchiveError(
                f"manifest.json: run_count is {self.manifest['run_count']} but the archive holds {len(self.run_ids)}"
            )
        for run_id, member in sorted(self.metric_members.items()):
            if run_id not in self.run_ids:
                raise ArchiveError(f"{member}: metrics for run {run_id!r}, which is not in runs.json")
        self.runs_read = True

    def metric_rows(self, run_id: str) -> Iterator[MetricRow]:
        """The metric rows of one run (none when the archive has no metrics file for it), in order."""
        name = f"metrics/{run_id}.csv"
        if name not in self.infos:
            return
        lines = _lines(member_text(self.zip, self.infos[name]), where=name)
        header = next(lines, None)
        if header is None or header.rstrip("\r") != CSV_HEADER:
            raise ArchiveError(f"{name}: the header must be {CSV_HEADER}; got {header!r:.80}")
        reader = csv.reader(lines, strict=True)
        previous: tuple[int, str] | None = None
        last = self.step_limits.get(run_id)
        try:
            for row in reader:
                try:
                    step, metric, value = metric_row(row)
                except ArchiveError as exc:
                    raise ArchiveError(f"{name}: line {reader.line_num + 1}: {exc}") from None
                if previous is not None and (step, metric) <= previous:
                    where = f"{name}: line {reader.line_num + 1}"
                    if (step, metric) == previous:
                        raise ArchiveError(f"{where}: step {step} of {metric!r:.80} appears twice")
                    raise ArchiveError(
                        f"{where}: step {step} of {metric!r:.80} comes after step {previous[0]} of "
                        f"{previous[1]!r:.80}; rows are in (step, name) order"
                    )
                previous = (step, metric)
                if last is not None and step > last:
                    raise ArchiveError(
                        f"{name}: line {reader.line_num + 1}: run {run_id}: step {step} of {metric!r:.80} is beyond "
                        f"its total_steps {last}; a finished run's metrics end at its last step"
                    )
                yield step, metric, value
        except csv.Error as exc:
            raise ArchiveError(f"{name}: line {reader.line_num + 1}: not valid CSV ({exc})") from None

    def sweeps(self) -> Iterator[ArchivedSweep]:
        """The sweeps of `sweeps.json` (none when absent), each checked against the runs read before."""
        if not self.runs_read:
            raise RuntimeError("ArchiveReader.sweeps() needs runs() to have been read to its end")
        if "sweeps.json" not in self.infos:
            if self.manifest["sweep_count"] != 0:
                raise ArchiveError(
                    f"manifest.json: sweep_count is {self.manifest['sweep_count']} but the archive holds 0"
                )
            return
        seen: set[str] = set()
        for index, raw in enumerate(self._elements("sweeps.json")):
            sweep = check_sweep(raw, f"sweeps.json: sweeps[{index}]", run_ids=self.run_ids)
            if sweep.id in seen:
                raise ArchiveError("sweeps.json: a sweep id appears more than once")
            seen.add(sweep.id)
            yield sweep
        if self.manifest["sweep_count"] != len(seen):
            raise ArchiveError(
                f"manifest.json: sweep_count is {self.manifest['sweep_count']} but the archive holds {len(seen)}"
            )

    def check_all(self) -> None:
        """Read every member to its end with every check, the runs' consistency included (which an import
        checks after their shape: `engine.jobs.transfer.rekey`), keeping nothing."""
        for index, run in enumerate(self.runs()):
            check_consistent(run, run_where(index, run.id))
            for _ in self.metric_rows(run.id):
                pass
        for _ in self.sweeps():
            pass

    def close(self) -> None:
        if getattr(self, "zip", None) is not None:
            self.zip.close()
        if self.closes_file:
            self.file.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def json_array(chunks: Iterator[str], *, where: str) -> Iterator[Any]:
    """The elements of a JSON array arriving as text chunks, each decoded as soon as it is complete (with
    `cache.archive.limits.strict_decoder`: no repeated keys, no huge integers)."""
    decoder = strict_decoder()
    buffer, position, exhausted = "", 0, False
    lines_before, column_before = 0, 0  # of the text already dropped from the buffer's front

    def more() -> bool:
        """Drop what was parsed, append the next chunk; False at the end of the text."""
        nonlocal buffer, position, exhausted, lines_before, column_before
        if exhausted:
            return False
        dropped = buffer[:position]
        if "\n" in dropped:
            lines_before += dropped.count("\n")
            column_before = len(dropped) - dropped.rfind("\n") - 1
        else:
            column_before += len(dropped)
        buffer, position = buffer[position:], 0
        for chunk in chunks:
            if chunk:
                buffer += chunk
                return True
        exhausted = True
        return False

    def next_token() -> str:
        """The next character that is not white space ("" at the end), at `position`."""
        nonlocal position
        while True:
            while position < len(buffer) and buffer[position] in " \t\r\n":
                position += 1
            if position < len(buffer):
                return buffer[position]
            if not more():
                return ""

    def invalid(message: str, at: int) -> ArchiveError:
        newline = buffer.rfind("\n", 0, at)
        line = lines_before + buffer.count("\n", 0, at) + 1
        column = at - newline if newline >= 0 else column_before + at + 1
        return ArchiveError(f"{where}: not valid JSON ({message} at line {line} column {column})")

    def element() -> Any:
        nonlocal position
        while True:
            try:
                value, end = decoder.raw_decode(buffer, position)
                if not exhausted and buffer[end:].strip(NUMBER_CHARACTERS) == "":
                    more()  # a number at the end of the text read so far may go on: decode again with more
                    continue
                position = end
                return value
            except json.JSONDecodeError as exc:
                if len(buffer) - position > MAX_ELEMENT_BYTES:
                    raise ArchiveError(
                        f"{where}: not valid JSON, or an element larger than {MAX_ELEMENT_BYTES:,} characters"
                    ) from None
                if not more():
                    raise invalid(exc.msg, exc.pos) from None
            except InputError as exc:
                raise ArchiveError(f"{where}: {exc}") from None
            except RecursionError:
                raise ArchiveError(f"{where}: JSON nested too deeply") from None

    first = next_token()
    if first != "[":
        kinds = {"{": "an object", '"': "a string", "t": "a boolean", "f": "a boolean", "n": "null", "": "nothing"}
        got = kinds.get(first, "a number")
        raise ArchiveError(f"{where}: {where.removesuffix('.json')}: must be a list; got {got}")
    position += 1
    if next_token() == "]":
        position += 1
    else:
        while True:
            if next_token() == "":
                raise invalid("Expecting value", position)
            yield element()
            token = next_token()
            position += 1
            if token == "]":
                break
            if token != ",":
                raise invalid("Expecting ',' delimiter", position - 1)
    if next_token() != "":
        raise invalid("Extra data", position)


def _lines(chunks: Iterator[str], *, where: str) -> Iterator[str]:
    """Lines of text (without their newline) from chunks, none longer than `MAX_METRIC_LINE` characters."""
    pending = ""
    for chunk in chunks:
        lines = (pending + chunk).split("\n")
        pending = lines.pop()
        if len(pending) > MAX_METRIC_LINE:
            raise ArchiveError(f"{where}: a line longer than {MAX_METRIC_LINE} characters; not a metrics row")
        yield from lines
    if pending:
        yield pending


def read_archive(source: Source) -> Archive:
    """The whole archive, decoded and checked, in memory: for small archives (tests, previews of a few
    runs). Imports stream instead (`ArchiveReader`)."""
    with ArchiveReader(source) as reader:
        runs = tuple(reader.runs())
        metrics = {run.id: list(reader.metric_rows(run.id)) for run in runs if run.id in reader.metric_members}
        sweeps = tuple(reader.sweeps())
        manifest = reader.manifest
    return Archive(
        engine_version=manifest["engine_version"],
        runs=runs,
        metrics=metrics,
        sweeps=sweeps,
        includes_metrics=manifest["includes_metrics"],
        created_at=manifest["created_at"],
        private_diagnostics=manifest["private_diagnostics"],
        privacy_note=manifest["privacy_note"],
    )

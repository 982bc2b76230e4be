"""Writing a run archive (`cache.archive.format` describes it): checked by the reader before it is kept."""

import csv
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

from cache.archive import format as archive_format
from cache.archive.format import CSV_HEADER, MAX_MEMBERS, Archive, ArchiveError
from cache.archive.reader import ArchiveReader


def write_archive(archive: Archive, path: Path | str | None = None) -> bytes:
    """The archive as zip bytes (also written to `path`, atomically, when given). It is validated
    exactly as an import would read it, so nothing is written that could not be read back."""
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
    if total > archive_format.MAX_TOTAL_BYTES or len(members) > MAX_MEMBERS:
        raise ArchiveError(
            f"the export would hold {total / 2**20:.0f} MiB in {len(members)} files; the limit is "
            f"{archive_format.MAX_TOTAL_BYTES // 2**20} MiB and {MAX_MEMBERS} files: export fewer runs"
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    data = buffer.getvalue()
    with ArchiveReader(data) as reader:
        reader.check_all()  # the reader's checks, on exactly what is written
    if path is not None:
        target = Path(path)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.partial")
        temporary.write_bytes(data)
        temporary.replace(target)
    return data


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()

"""Writing a run archive (`cache.archive.format` describes it): checked by the reader before it is kept, its
metrics CSV's text cells through `cache.archive.csv_cells`, and saved to a path only where
`cache.archive.destination` allows."""

import csv
import io
import json
import zipfile
from pathlib import Path
from typing import Any

from cache.archive import format as archive_format
from cache.archive.csv_cells import csv_cell
from cache.archive.destination import save_archive
from cache.archive.format import CSV_HEADER, MAX_MEMBERS, Archive, ArchiveError
from cache.archive.reader import ArchiveReader


def write_archive(archive: Archive, path: Path | str | None = None, *, force: bool = False) -> bytes:
    """The archive as zip bytes (also written to `path`, atomically, when given: a new file, or with `force` an
    existing one `cache.archive.destination` allows to replace). It is validated exactly as an import would
    read it, so nothing is written that could not be read back."""
    members = {"manifest.json": _dumps(archive.manifest()), "runs.json": _dumps([r.to_json() for r in archive.runs])}
    if archive.sweeps:
        members["sweeps.json"] = _dumps([s.to_json() for s in archive.sweeps])
    for run_id, rows in archive.metrics.items():
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        writer.writerows((step, csv_cell(name), repr(float(value))) for step, name, value in rows)
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
        save_archive(data, path, force=force)
    return data


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()

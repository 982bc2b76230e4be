"""CSV uploads for the Data page: inspect a file, turn the user's choices into a declared schema, save both.

Pure functions (no Streamlit): `app/services/data.py` caches and calls them, the page shows what they return.
An upload is read in full by the engine's own CSV reader (size, UTF-8, header, field count of every row)
before anything is kept, and saving writes the file and its schema atomically under
`<data home>/uploads/`: a malformed or interrupted upload leaves nothing behind.

Privacy: the preview rows, the suggested classes and categories come from the private file itself. They
are shown to the uploader only, to help declare the schema; numeric bounds are never suggested, because
bounds taken from the data would leak it (the user declares them from public knowledge). What is saved
travels into every run spec, export and one-hot layout, so a class or category is suggested only when at
least `RARE_LEVEL_ROWS` rows have it (the rest are counted as withheld; the user may type them).
"""

import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.training.datasets import (
    CSV_PREFIX,
    MAX_CSV_BYTES,
    RARE_LEVEL_ROWS,
    CsvSchemaError,
    DatasetError,
    csv_dataset_info,
    csv_schema_suggestion,
    load_csv,
    parse_csv_schema,
)

# The engine has no public "header, first rows and row count" reader yet; this is its own strict reader
# (the exact checks training applies). See the Data page's report for the proposed public function.
from engine.training.datasets.tabular_csv import preview_csv

UPLOADS_FOLDER = "uploads"
PREVIEW_ROWS = 20
MAX_SUGGESTED_CATEGORIES = 20
ROLES = ("numeric", "categorical", "ignored")
DEFAULT_TEST_FRACTION = 0.2
MAX_TEST_FRACTION = 0.9


class UploadError(ValueError):
    """The uploaded file cannot be used; the message says why and what to change. Nothing was saved."""


@dataclass(frozen=True, kw_only=True)
class Inspection:
    """What an upload holds (header, first rows, size: all private to the uploader), or why it is unusable."""

    file_name: str
    size: int
    error: str | None = None  # the file is malformed: nothing below is set
    sha256: str = ""
    header: tuple[str, ...] = ()
    preview: tuple[tuple[str, ...], ...] = ()
    n_rows: int = 0


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    """`csv_schema_suggestion`'s suggestion for one target column, or why that column cannot be the target.
    Its classes and categories are read from the private file, less the rare ones (counted as withheld)."""

    target: str
    schema: dict[str, Any] | None = None
    error: str | None = None
    min_rows: int = RARE_LEVEL_ROWS  # a suggested class or category is seen in at least this many rows
    withheld_classes: int = 0  # target values seen in fewer rows: not suggested
    withheld_levels: dict[str, int] = field(default_factory=dict)  # column → its categories seen in fewer rows


@dataclass(frozen=True, kw_only=True)
class ColumnChoice:
    """The user's declaration for one feature column."""

    role: str = "ignored"  # one of ROLES
    low: float | None = None
    high: float | None = None
    categories: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SavedUpload:
    """A saved CSV and one declared schema for it, as listed from `<data home>/uploads/`."""

    label: str
    dataset: str  # "csv:PATH", for a spec's "dataset"
    schema: dict[str, Any]
    file_name: str
    sha256: str
    size: int
    n_train: int
    n_test: int
    n_features: int
    n_classes: int
    saved_at: float
    sidecar: Path = field(repr=False)

    @property
    def path(self) -> Path:
        return Path(self.dataset[len(CSV_PREFIX) :])

    def spec_fields(self) -> dict[str, Any]:
        """What a run spec needs to train on this upload."""
        return {"dataset": self.dataset, "schema": self.schema}


# ---------------------------------------------------------------------------------------- reading an upload


def check_size(file_name: str, data: bytes) -> None:
    if not data:
        raise UploadError(f"{file_name}: the file is empty; expected a header row, then data rows")
    if len(data) > MAX_CSV_BYTES:
        raise UploadError(
            f"{file_name}: the file has {len(data):,} bytes, more than the upload limit of {MAX_CSV_BYTES:,} bytes"
        )


@contextmanager
def _staged(data: bytes, file_name: str, folder: Path | None = None) -> Iterator[Path]:
    """The bytes as a file the engine can read (in `folder`, on disk for good; else in the temporary folder),
    removed afterwards unless moved; engine errors name `file_name`, not this file."""
    handle, raw = tempfile.mkstemp(prefix=".upload-", suffix=".partial", dir=folder)
    path = Path(raw)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            if folder is not None:
                out.flush()
                os.fsync(out.fileno())
        try:
            yield path
        except (DatasetError, CsvSchemaError) as exc:
            raise UploadError(str(exc).replace(str(path), file_name)) from None
    finally:
        path.unlink(missing_ok=True)


def inspect_upload(file_name: str, data: bytes, preview_rows: int = PREVIEW_ROWS) -> Inspection:
    """Read the whole upload as training will; a malformed file gives an Inspection whose error names the
    line and the problem."""
    try:
        return _inspect(file_name, data, preview_rows)
    except UploadError as exc:
        return Inspection(file_name=file_name, size=len(data), error=str(exc))


def _inspect(file_name: str, data: bytes, preview_rows: int) -> Inspection:
    check_size(file_name, data)
    with _staged(data, file_name) as path:
        csv_preview = preview_csv(path, max_rows=preview_rows)
    header, preview, n_rows = csv_preview.header, csv_preview.rows, csv_preview.n_rows
    if n_rows == 0:
        raise UploadError(f"{file_name}: the file has a header but no data rows")
    if (named := sum(1 for name in header if name)) < 2:
        raise UploadError(
            f"{file_name}: the header names {named} column(s); a dataset needs a target column and at least "
            "one feature column, each with a non-empty name"
        )
    return Inspection(
        file_name=file_name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        header=tuple(header),
        preview=tuple(preview),
        n_rows=n_rows,
    )


def suggest_schema(file_name: str, data: bytes, target: str, min_rows: int = RARE_LEVEL_ROWS) -> Suggestion:
    """The engine's suggested schema with `target` as the label column, or why `target` cannot be one; classes
    and categories seen in fewer than `min_rows` rows are withheld (counted, not named)."""
    check_size(file_name, data)
    try:
        with _staged(data, file_name) as path:
            found = csv_schema_suggestion(path, target, max_categories=MAX_SUGGESTED_CATEGORIES, min_rows=min_rows)
    except UploadError as exc:
        return Suggestion(target=target, error=str(exc), min_rows=min_rows)
    return Suggestion(
        target=target,
        schema=found.schema,
        min_rows=found.min_rows,
        withheld_classes=found.withheld_classes,
        withheld_levels=found.withheld_levels,
    )


def default_target(header: Sequence[str]) -> str:
    """The last named column (the usual place of the label)."""
    return next(name for name in reversed(header) if name)


def default_choice(column: str, suggestion: Mapping[str, Any] | None) -> ColumnChoice:
    """The suggested role of a column: numeric with undeclared bounds, categorical with the values many rows
    have, or ignored."""
    if suggestion and column in suggestion.get("numeric", {}):
        return ColumnChoice(role="numeric")
    if suggestion and column in suggestion.get("categorical", {}):
        return ColumnChoice(role="categorical", categories=tuple(suggestion["categorical"][column]))
    return ColumnChoice()


# ---------------------------------------------------------------------------------------- the declared schema


def lines(text: str) -> list[str]:
    """One value per non-blank line, stripped (for the classes and categories text areas)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def build_schema(
    *, target: str, classes: Sequence[str], columns: Mapping[str, ColumnChoice], test_fraction: float
) -> dict[str, Any]:
    """The raw schema the choices describe (validated by `schema_problems`), in the form `parse_csv_schema` reads."""
    features = {name: choice for name, choice in columns.items() if name != target}
    numeric = {name: [c.low, c.high] for name, c in features.items() if c.role == "numeric"}
    categorical = {name: list(c.categories) for name, c in features.items() if c.role == "categorical"}
    return {
        "target": target,
        "classes": list(classes),
        "numeric": numeric,
        "categorical": categorical,
        "test_fraction": test_fraction,
    }


def _bounds_problem(name: str, bounds: Sequence[Any]) -> str | None:
    low, high = bounds
    if low is None or high is None:
        missing = " and ".join(side for side, value in (("lower", low), ("upper", high)) if value is None)
        plural = "s" * (" and " in missing)
        source = "from public knowledge, never the data"
        return f"Column “{name}” is numeric: declare its {missing} bound{plural} ({source})."
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        return f"Column “{name}”: the lower bound must be finite and below the upper bound; got {low:g} and {high:g}."
    return None


def _repeated(values: Sequence[str]) -> str | None:
    """The first value listed a second time, if any."""
    return next((value for i, value in enumerate(values) if value in values[:i]), None)


def _field_words(field: str, target: Any) -> str:
    """A schema field as the form names it ("schema.numeric.age" → "Column “age”")."""
    column = field.removeprefix("schema.numeric.").removeprefix("schema.categorical.")
    if column != field:
        return f"Column “{column}”"
    if field.startswith(("schema.classes", "schema.target")):
        return f"{'The classes of the target' if 'classes' in field else 'Target'} column “{target}”"
    return "Test fraction" if field == "schema.test_fraction" else "The schema"


def schema_problems(raw: Mapping[str, Any]) -> list[str]:
    """Every problem of a raw schema, in the form's words: the column at fault and what it allows (never a schema
    key); [] when valid."""
    problems: list[str] = []
    target = raw.get("target")
    classes = list(raw.get("classes", []))
    if len(classes) < 2:
        problems.append(f"The target column “{target}” needs at least two classes: list each value, one per line.")
    elif (twice := _repeated(classes)) is not None:
        problems.append(f"The classes of the target column “{target}” list “{twice}” twice: each class once.")
    problems += [m for name, bounds in raw.get("numeric", {}).items() if (m := _bounds_problem(name, bounds))]
    for name, categories in raw.get("categorical", {}).items():
        if not categories:
            problems.append(f"Column “{name}” is categorical: list at least one category (or ignore the column).")
        elif (twice := _repeated(categories)) is not None:
            problems.append(f"Column “{name}” lists the category “{twice}” twice: each category once.")
    if not raw.get("numeric") and not raw.get("categorical"):
        problems.append("Every feature column is ignored: declare at least one as numeric or categorical.")
    if problems:
        return problems
    try:
        parse_csv_schema(raw)
    except CsvSchemaError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ").replace("schema.target", "the target")
        problems.append(f"{_field_words(exc.field, target)}: {message}")
    return problems


# ---------------------------------------------------------------------------------------- saving and listing


def uploads_dir(home: Path) -> Path:
    return home / UPLOADS_FOLDER


def _write_atomically(target: Path, data: bytes) -> None:
    handle, raw = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(raw, target)
    except BaseException:
        Path(raw).unlink(missing_ok=True)
        raise


def schema_id(schema: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:12]


def save_upload(home: Path, *, file_name: str, data: bytes, raw_schema: Mapping[str, Any], label: str) -> SavedUpload:
    """Check the whole file against the schema (every cell, as training will), then keep it as
    `uploads/<sha256>.csv` with its schema beside it (`<sha256>.<schema id>.json`), both written atomically.
    UploadError or CsvSchemaError: nothing was saved."""
    check_size(file_name, data)
    schema = parse_csv_schema(raw_schema)
    label = label.strip() or f"{Path(file_name).stem} → {schema.target}"
    folder = uploads_dir(home).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(data).hexdigest()
    final = folder / f"{sha}.csv"
    with _staged(data, file_name, folder) as staged:
        info = csv_dataset_info(staged, schema)
        load_csv(staged, schema)  # every label and numeric cell, with the line and column of the first bad one
        if not (final.is_file() and final.stat().st_size == len(data)):  # else these bytes are saved already
            os.replace(staged, final)
    canonical = schema.to_dict()
    sidecar = folder / f"{sha}.{schema_id(canonical)}.json"
    record = {
        "label": label,
        "file_name": file_name,
        "dataset": CSV_PREFIX + str(final),
        "schema": canonical,
        "sha256": sha,
        "size": len(data),
        "n_train": info.n_train,
        "n_test": info.n_test,
        "n_features": info.n_features,
        "n_classes": info.n_classes,
        "saved_at": time.time(),
    }
    _write_atomically(sidecar, json.dumps(record, indent=1, ensure_ascii=False).encode())
    return _saved(record, sidecar)


def _saved(record: Mapping[str, Any], sidecar: Path) -> SavedUpload:
    return SavedUpload(
        label=str(record["label"]),
        dataset=str(record["dataset"]),
        schema=dict(record["schema"]),
        file_name=str(record["file_name"]),
        sha256=str(record["sha256"]),
        size=int(record["size"]),
        n_train=int(record["n_train"]),
        n_test=int(record["n_test"]),
        n_features=int(record["n_features"]),
        n_classes=int(record["n_classes"]),
        saved_at=float(record["saved_at"]),
        sidecar=sidecar,
    )


def list_uploads(home: Path) -> list[SavedUpload]:
    """Saved uploads whose CSV is still there, newest first; a sidecar that does not read is skipped."""
    folder = uploads_dir(home)
    found = []
    for sidecar in folder.glob("[!.]*.json") if folder.is_dir() else ():
        try:
            saved = _saved(json.loads(sidecar.read_text(encoding="utf-8")), sidecar)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if saved.path.is_file():
            found.append(saved)
    return sorted(found, key=lambda s: (-s.saved_at, s.label))


def labelled(uploads: Sequence[SavedUpload]) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, dataset string, schema) per upload; a label used twice gets the schema id appended."""
    counts: dict[str, int] = {}
    for upload in uploads:
        counts[upload.label] = counts.get(upload.label, 0) + 1
    return [
        (u.label if counts[u.label] == 1 else f"{u.label} [{schema_id(u.schema)}]", u.dataset, u.schema)
        for u in uploads
    ]


def delete_upload(upload: SavedUpload) -> None:
    """Forget a saved upload: its schema file, and the CSV itself once no other schema of the same file remains.
    Runs trained on it keep their records (their dataset then reads as an upload no longer saved)."""
    upload.sidecar.unlink(missing_ok=True)
    if not any(upload.path.parent.glob(f"{upload.sha256}.*.json")):
        upload.path.unlink(missing_ok=True)

"""A user's CSV upload (dataset name `csv:PATH`), encoded with a schema the user declares.

The file is UTF-8 (a byte-order mark is allowed), comma-separated, with a header row; cells are
stripped of surrounding whitespace and blank lines are skipped. The schema (a JSON object, kept in
the run spec under `schema`) names the target column and its classes, numeric columns with their
[low, high] bounds, and categorical columns with their category lists:

    {"target": "income", "classes": ["<=50K", ">50K"],
     "numeric": {"age": [17, 90], "hours-per-week": [1, 99]},
     "categorical": {"sex": ["Female", "Male"], "workclass": ["Private", "State-gov"]},
     "test_fraction": 0.2}

Preprocessing never looks at the private data: numeric values are clipped to the declared bounds
and scaled to [0, 1]; categorical values are one-hot encoded against the declared list (a value
not in it, or an empty cell, encodes as all zeros). Features are the numeric columns in declared
order, then the one-hot blocks in declared order. Columns the schema does not mention are ignored.
The number of rows is treated as public, as for every dataset size, and the train/test split is a
fixed-seed permutation of the row indices. A schema suggested from the file, for the uploader to
review, is `engine.training.datasets.csv_suggestion`'s.
"""

import csv
import functools
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from engine.privacy.limits import brief
from engine.training.datasets.base import Dataset, DatasetInfo
from engine.training.datasets.files import DatasetError

CSV_PREFIX = "csv:"
MAX_CSV_BYTES = 200_000_000  # 200 MB
MAX_CSV_FEATURES = 10_000
CSV_SPLIT_SEED = 20_260_102  # a public constant: the split does not depend on the data
CSV_DEFAULT_TEST_FRACTION = 0.2
CSV_MAX_TEST_FRACTION = 0.9
SCHEMA_KEYS = ("target", "classes", "numeric", "categorical", "test_fraction")


class CsvSchemaError(ValueError):
    """A declared CSV schema is invalid; `field` is the path inside the schema (e.g. "schema.numeric.age")."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, kw_only=True)
class CsvSchema:
    target: str
    classes: tuple[str, ...]
    numeric: tuple[tuple[str, float, float], ...] = ()  # (column, low, high)
    categorical: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (column, categories)
    test_fraction: float = CSV_DEFAULT_TEST_FRACTION

    @property
    def n_features(self) -> int:
        return len(self.numeric) + sum(len(categories) for _, categories in self.categorical)

    @property
    def feature_names(self) -> list[str]:
        """One name per feature column: the numeric column, or `column=category` for a one-hot column."""
        names = [name for name, _, _ in self.numeric]
        names += [f"{name}={category}" for name, categories in self.categorical for category in categories]
        return names

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, which `parse_csv_schema` reads back to an equal schema."""
        return {
            "target": self.target,
            "classes": list(self.classes),
            "numeric": {name: [low, high] for name, low, high in self.numeric},
            "categorical": {name: list(categories) for name, categories in self.categorical},
            "test_fraction": self.test_fraction,
        }


# ---------------------------------------------------------------- schema validation


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite_number(value: Any) -> bool:
    if not _is_number(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer of hundreds of digits
        return False


def _name(field: str, value: Any, what: str = "a column name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise CsvSchemaError(field, f"expected {what} (a non-empty string), got {brief(value)}")
    return value.strip()


def _string_list(field: str, value: Any, *, minimum: int, what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or len(value) < minimum:
        raise CsvSchemaError(
            field, f"expected a list of at least {minimum} {what} (non-empty strings), got {brief(value)}"
        )
    items = tuple(_name(f"{field}[{i}]", item, what) for i, item in enumerate(value))
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item in seen:
            raise CsvSchemaError(f"{field}[{i}]", f"{brief(item)} is listed twice; {what} must be unique")
        seen.add(item)
    return items


def _columns(field: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CsvSchemaError(field, f"expected an object mapping column names to declarations, got {brief(value)}")
    return value


def parse_csv_schema(raw: Mapping[str, Any]) -> CsvSchema:
    """Validate a JSON schema object; CsvSchemaError names the field and what it allows."""
    if not isinstance(raw, Mapping):
        raise CsvSchemaError("schema", f"expected an object, got {type(raw).__name__}")
    for key in raw:
        if key not in SCHEMA_KEYS:
            raise CsvSchemaError(f"schema.{key}", f"unknown key; allowed keys: {', '.join(SCHEMA_KEYS)}")
    if "target" not in raw:
        raise CsvSchemaError("schema.target", "required: the name of the label column")
    target = _name("schema.target", raw["target"])
    if "classes" not in raw:
        raise CsvSchemaError("schema.classes", "required: the list of the target's values (at least 2)")
    classes = _string_list("schema.classes", raw["classes"], minimum=2, what="class values")

    used: dict[str, str] = {target: "schema.target"}

    def column(field: str, name: Any) -> str:
        checked = _name(field, name)
        if checked in used:
            raise CsvSchemaError(field, f"column {brief(checked)} is already declared as {used[checked]}")
        used[checked] = field
        return checked

    numeric = []
    for name, bounds in _columns("schema.numeric", raw.get("numeric", {})).items():
        field = f"schema.numeric.{name}"
        checked = column(field, name)
        if (
            not isinstance(bounds, list | tuple)
            or len(bounds) != 2
            or not all(_finite_number(b) for b in bounds)
            or not bounds[0] < bounds[1]
        ):
            raise CsvSchemaError(field, f"expected [low, high], finite numbers with low < high, got {brief(bounds)}")
        numeric.append((checked, float(bounds[0]), float(bounds[1])))
    categorical = []
    for name, categories in _columns("schema.categorical", raw.get("categorical", {})).items():
        field = f"schema.categorical.{name}"
        categorical.append((column(field, name), _string_list(field, categories, minimum=1, what="categories")))
    if not numeric and not categorical:
        raise CsvSchemaError("schema", "declare at least one feature column under numeric or categorical")
    test_fraction = raw.get("test_fraction", CSV_DEFAULT_TEST_FRACTION)
    if not _is_number(test_fraction) or not 0 < test_fraction <= CSV_MAX_TEST_FRACTION:
        raise CsvSchemaError(
            "schema.test_fraction", f"expected a number in (0, {CSV_MAX_TEST_FRACTION}], got {brief(test_fraction)}"
        )
    schema = CsvSchema(
        target=target,
        classes=classes,
        numeric=tuple(numeric),
        categorical=tuple(categorical),
        test_fraction=float(test_fraction),
    )
    if schema.n_features > MAX_CSV_FEATURES:
        raise CsvSchemaError("schema", f"{schema.n_features} feature columns, more than the limit {MAX_CSV_FEATURES}")
    return schema


# ---------------------------------------------------------------- reading the file


def _decoded_lines(path: Path, handle: BinaryIO) -> Iterator[str]:
    """The file's lines as text; a line that is not UTF-8 raises an error naming it."""
    for number, raw in enumerate(handle, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{path}: line {number} is not valid UTF-8 (byte {exc.start + 1} of the line); save the file as UTF-8"
            ) from None
        yield text.removeprefix("\ufeff") if number == 1 else text


@contextmanager
def csv_rows(path: Path) -> Iterator[tuple[list[str], Iterator[tuple[int, list[str]]]]]:
    """(header, rows): rows yields (line number, stripped cells) and checks every row's field count."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the CSV file ({exc.strerror or exc})") from exc
    if not path.is_file():
        raise DatasetError(f"{path}: not a file")
    if size > MAX_CSV_BYTES:
        raise DatasetError(f"{path}: the file has {size:,} bytes, more than the limit of {MAX_CSV_BYTES:,}")
    with open(path, "rb") as handle:
        reader = csv.reader(_decoded_lines(path, handle), strict=True)

        def rows() -> Iterator[tuple[int, list[str]]]:
            try:
                for cells in reader:
                    if not cells:
                        continue  # a blank line
                    yield reader.line_num, [cell.strip() for cell in cells]
            except csv.Error as exc:
                raise DatasetError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from exc

        body = rows()
        first = next(body, None)
        if first is None:
            raise DatasetError(f"{path}: the file is empty; expected a header row, then data rows")
        header = first[1]
        columns: dict[str, int] = {}
        for index, name in enumerate(header):
            if name and name in columns:
                raise DatasetError(
                    f"{path}: line {first[0]}: duplicate column name {brief(name)} in the header "
                    f"(columns {columns[name] + 1} and {index + 1})"
                )
            columns[name] = index

        def checked() -> Iterator[tuple[int, list[str]]]:
            for line, cells in body:
                if len(cells) != len(header):
                    raise DatasetError(
                        f"{path}: line {line} has {len(cells)} fields, expected {len(header)} as in the header"
                    )
                yield line, cells

        yield header, checked()


def column_index(path: Path, header: list[str], name: str) -> int:
    try:
        return header.index(name)
    except ValueError:
        raise DatasetError(f"{path}: no column {brief(name)} in the header") from None


def _split_sizes(path: Path, n_rows: int, test_fraction: float) -> tuple[int, int]:
    if n_rows == 0:
        raise DatasetError(f"{path}: the file has a header but no data rows")
    n_test = round(n_rows * test_fraction)
    if n_test < 1 or n_test >= n_rows:
        raise DatasetError(
            f"{path}: {n_rows} data rows are too few for a train and a test split at test_fraction {test_fraction}"
        )
    return n_rows - n_test, n_test


def _as_path(path: str | Path) -> Path:
    return Path(path)


@dataclass(frozen=True)
class CsvPreview:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]  # the first `max_rows` data rows, stripped
    n_rows: int


def preview_csv(path: str | Path, max_rows: int = 20) -> CsvPreview:
    """Read the whole file with training's checks (size, UTF-8, header, field counts), before any schema
    exists; a `DatasetError` names the line."""
    with csv_rows(_as_path(path)) as (header, rows):
        first, n_rows = [], 0
        for _, cells in rows:
            if n_rows < max_rows:
                first.append(tuple(cells))
            n_rows += 1
    return CsvPreview(header=tuple(header), rows=tuple(first), n_rows=n_rows)


def csv_dataset_info(path: str | Path, schema: CsvSchema) -> DatasetInfo:
    """Public facts about an upload, after checking every row against the schema with training's own
    reader (a bad cell is refused here, naming line and column, not when a worker trains it later); the
    number of rows is treated as public. The check of a file is remembered while its size and
    modification time stay the same."""
    path = _as_path(path)
    try:
        found = path.stat()
    except OSError:
        return _checked_info(path, -1, -1, schema)  # not remembered: it raises, naming the problem
    return _checked_info(path, found.st_size, found.st_mtime_ns, schema)


@functools.lru_cache(maxsize=32)
def _checked_info(path: Path, size: int, modified_ns: int, schema: CsvSchema) -> DatasetInfo:
    n_rows = sum(1 for _ in _encoded_rows(path, schema))
    n_train, n_test = _split_sizes(path, n_rows, schema.test_fraction)
    return DatasetInfo(
        name=CSV_PREFIX + str(path),
        title=f"CSV upload ({path.name})",
        n_train=n_train,
        n_test=n_test,
        n_classes=len(schema.classes),
        n_features=schema.n_features,
        description=f"Your upload {path.name}: predict {brief(schema.target)} ({len(schema.classes)} classes) "
        f"from {len(schema.numeric) + len(schema.categorical)} declared columns.",
        source="your upload",
        load=lambda data_dirs: load_csv(path, schema),
    )


EncodedRow = tuple[int, list[float], list[int]]  # label, numeric values, category codes (-1: none of them)


def _encoded_rows(path: Path, schema: CsvSchema) -> Iterator[EncodedRow]:
    """Every data row encoded with the declared schema only; a bad cell raises an error naming line and column."""
    class_index = {name: i for i, name in enumerate(schema.classes)}
    with csv_rows(path) as (header, rows):
        target = column_index(path, header, schema.target)
        numeric = [(column_index(path, header, name), name) for name, _, _ in schema.numeric]
        categorical = [
            (column_index(path, header, name), {c: i for i, c in enumerate(categories)})
            for name, categories in schema.categorical
        ]
        for line, cells in rows:
            label = class_index.get(cells[target])
            if label is None:
                raise DatasetError(
                    f"{path}: line {line}: target value {brief(cells[target], 60)} is not one of "
                    f"the declared classes {brief(list(schema.classes), 200)}"
                )
            values = []
            for index, name in numeric:
                cell = cells[index]
                try:
                    value = float(cell)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value):
                    problem = "is empty" if not cell else f"holds {brief(cell, 60)}, not a finite number"
                    raise DatasetError(f"{path}: line {line}, column {brief(name)}: the numeric cell {problem}")
                values.append(value)
            yield label, values, [mapping.get(cells[index], -1) for index, mapping in categorical]


def load_csv(path: str | Path, schema: CsvSchema) -> Dataset:
    """Encode the upload with the declared schema only; every bad cell raises an error naming line and column."""
    path = _as_path(path)
    labels: list[int] = []
    values: list[float] = []  # row-major (rows, numeric columns)
    codes: list[int] = []  # row-major (rows, categorical columns); -1 encodes as all zeros
    for label, row_values, row_codes in _encoded_rows(path, schema):
        labels.append(label)
        values.extend(row_values)
        codes.extend(row_codes)
    n_train, n_test = _split_sizes(path, len(labels), schema.test_fraction)
    n_rows = len(labels)
    numeric, categorical = schema.numeric, schema.categorical
    x = np.zeros((n_rows, schema.n_features), dtype=np.float32)
    if numeric:
        raw = np.asarray(values, dtype=np.float64).reshape(n_rows, len(numeric))
        low = np.array([b[1] for b in numeric])
        high = np.array([b[2] for b in numeric])
        x[:, : len(numeric)] = (np.clip(raw, low, high) - low) / (high - low)
    if categorical:
        code = np.asarray(codes, dtype=np.int64).reshape(n_rows, len(categorical))
        offset = len(numeric)
        for j, (_, categories) in enumerate(categorical):
            present = code[:, j] >= 0
            x[np.flatnonzero(present), offset + code[present, j]] = 1.0
            offset += len(categories)
    y = np.asarray(labels, dtype=np.int64)
    order = np.random.default_rng(CSV_SPLIT_SEED).permutation(n_rows)
    test, train = order[:n_test], order[n_test:]
    assert len(train) == n_train
    return Dataset(
        name=CSV_PREFIX + str(path),
        x_train=x[train],
        y_train=y[train],
        x_test=x[test],
        y_test=y[test],
        n_classes=len(schema.classes),
    )

"""A SUGGESTED schema for a CSV upload, read from the private file itself, for the uploader to review.

Everything a saved schema declares travels into every run spec, every export and the model's one-hot
layout, so what is suggested from the data is kept to what many rows share:

- numeric columns (every cell a finite number) get bounds [null, null]: the user declares them from
  public knowledge (the smallest and largest value of a private column are themselves private);
- a categorical level or a class is suggested only when at least `min_rows` rows have it
  (`RARE_LEVEL_ROWS` = 10 by default, the usual minimum cell size of statistical disclosure control): a
  value that one or a few rows have identifies those rows. How many were withheld is reported, never the
  values; the user may type any level (public knowledge, such as a published code list) themselves;
- a column with more than `max_categories` distinct values (free text, identifiers) is left out.

The suggestion is shown to the uploader only, never logged or saved until the user saves a schema.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.training.datasets.files import DatasetError
from engine.training.datasets.tabular_csv import CSV_DEFAULT_TEST_FRACTION, column_index, csv_rows

RARE_LEVEL_ROWS = 10  # a level or class seen in fewer rows than this is not suggested
DEFAULT_MAX_CATEGORIES = 20


@dataclass(frozen=True, kw_only=True)
class CsvSuggestion:
    """A suggested schema and what was withheld from it."""

    schema: dict[str, Any]  # in the form `parse_csv_schema` reads, numeric bounds null
    min_rows: int  # the levels and classes suggested are each seen in at least this many rows
    withheld_classes: int = 0  # target values seen in fewer rows
    withheld_levels: dict[str, int] = field(default_factory=dict)  # categorical column → levels seen in fewer rows


def _sorted_values(values: list[str]) -> list[str]:
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def _common(counts: dict[str, int], min_rows: int) -> tuple[list[str], int]:
    """(the values seen in at least `min_rows` rows, sorted; how many others there are)."""
    kept = [value for value, n in counts.items() if n >= min_rows]
    return _sorted_values(kept), len(counts) - len(kept)


def csv_schema_suggestion(
    path: str | Path,
    target: str,
    *,
    max_categories: int = DEFAULT_MAX_CATEGORIES,
    min_rows: int = RARE_LEVEL_ROWS,
) -> CsvSuggestion:
    """The suggested schema with `target` as the label column (see the module's docstring), read with
    training's own checks; a `DatasetError` says why `target` cannot be the label."""
    if not isinstance(max_categories, int) or max_categories < 2:
        raise ValueError(f"max_categories must be an integer ≥ 2, got {max_categories!r}")
    if not isinstance(min_rows, int) or min_rows < 1:
        raise ValueError(f"min_rows must be an integer ≥ 1, got {min_rows!r}")
    path = Path(path)
    with csv_rows(path) as (header, rows):
        target_index = column_index(path, header, target)
        numeric = [True] * len(header)
        empty = [False] * len(header)
        seen: list[dict[str, int] | None] = [{} for _ in header]  # rows per value; None: too many values
        n_rows = 0
        for _, cells in rows:
            n_rows += 1
            for j, cell in enumerate(cells):
                if not cell:
                    empty[j] = True
                    numeric[j] = False
                    continue
                if numeric[j]:
                    try:
                        numeric[j] = math.isfinite(float(cell))
                    except ValueError:
                        numeric[j] = False
                counts = seen[j]
                if counts is not None:
                    counts[cell] = counts.get(cell, 0) + 1
                    if len(counts) > max_categories:
                        seen[j] = None
    if n_rows == 0:
        raise DatasetError(f"{path}: the file has a header but no data rows")
    labels = seen[target_index]
    if labels is None:
        raise DatasetError(
            f"{path}: the target column {target!r} has more than {max_categories} distinct values; "
            "it does not look like a class label"
        )
    if len(labels) < 2:
        raise DatasetError(f"{path}: the target column {target!r} has fewer than 2 distinct non-empty values")
    classes, withheld_classes = _common(labels, min_rows)
    schema: dict[str, Any] = {
        "target": target,
        "classes": classes,
        "numeric": {},
        "categorical": {},
        "test_fraction": CSV_DEFAULT_TEST_FRACTION,
    }
    withheld: dict[str, int] = {}
    for j, name in enumerate(header):
        if j == target_index or not name:
            continue
        if numeric[j] and not empty[j]:
            schema["numeric"][name] = [None, None]
        elif counts := seen[j]:
            levels, rare = _common(counts, min_rows)
            if levels:
                schema["categorical"][name] = levels
            if rare:
                withheld[name] = rare
    return CsvSuggestion(schema=schema, min_rows=min_rows, withheld_classes=withheld_classes, withheld_levels=withheld)


def infer_csv_schema(
    path: str | Path, target: str, max_categories: int = DEFAULT_MAX_CATEGORIES, min_rows: int = RARE_LEVEL_ROWS
) -> dict[str, Any]:
    """The suggested schema alone (`csv_schema_suggestion`), in the form `parse_csv_schema` reads."""
    return csv_schema_suggestion(path, target, max_categories=max_categories, min_rows=min_rows).schema

"""A stored value as a table cell, the same way in every table the dashboard shows."""

import json
from typing import Any


def table_cell(value: Any) -> Any:
    """None, text, numbers and booleans as they are; lists, objects and anything else as JSON with sorted keys,
    so that one value always reads (and groups) the same."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True, default=str)

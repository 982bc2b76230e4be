"""A stored value as a table cell, the same way in every table the dashboard shows."""

import json
from typing import Any


def table_cell(value: Any) -> Any:
    """None, text, numbers and booleans as they are; a schedule in words; lists, objects and anything else as JSON
    with sorted keys, so that one value always reads (and groups) the same."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict) and isinstance(kind := value.get("kind"), str):
        return schedule_text(value, kind)
    return json.dumps(value, sort_keys=True, default=str)


def schedule_text(schedule: dict[str, Any], kind: str) -> str:
    """A schedule ({"kind": "linear", "end_factor": 0.52, ...}) as words: "linear (end_factor 0.52, epochs 10)"."""
    rest = ", ".join(f"{name} {json.dumps(v, default=str)}" for name, v in sorted(schedule.items()) if name != "kind")
    return f"{kind} ({rest})" if rest else kind

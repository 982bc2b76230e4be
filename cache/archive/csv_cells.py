"""CSV cells a spreadsheet shows as text: the one rule every CSV the lab writes applies to its cells.

A spreadsheet opening a CSV runs a text cell that starts with `=`, `+`, `-` or `@` as a formula, and so
does a cell that starts with a tab or a carriage return followed by one (`=HYPERLINK(...)` sends data
out, `=cmd|...` ran programs in older versions). Following the OWASP guidance on CSV injection, such a
text cell gets a leading single quote, which the spreadsheet shows as text. Numbers are written as
numbers: a float -0.5 stays -0.5, never '-0.5 (only text cells are neutralised).

Writers: the metrics CSV of a run archive (`cache.archive.writer`) and every CSV the dashboard offers
(`app.common.safe_text.csv_bytes`, which the Compare page's download uses).

Why neutralise on write and refuse at import, not escape reversibly: an archive's metric names go back
into a store, and an archive written then imported must give back the names the store had. The lab's
metric names are its own (`METRIC_NAME`: lowercase letters, digits and `_`, such as `epsilon_pld` or
`grad_norm_p50`), none of which starts with a formula character, so the import refuses any other name
(`cache.archive.format.metric_row`) and the quote never changes a name that travels: the round trip is
exact, and no reader has to undo an escape. A reversible escape would instead make every reader of the
archive (a spreadsheet, a script, an older lab) see names the lab never wrote.
"""

import re
from typing import Any

# Spreadsheets run a cell that starts with one of these as a formula (OWASP "CSV injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # every per-step metric the lab records


def csv_cell(value: Any) -> Any:
    """A cell a spreadsheet shows as text: a string starting with =, +, -, @, a tab or a carriage return gets
    a leading single quote; anything else (numbers, negative ones included) is unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value

"""Text the app does not control, made safe for where it is shown: Markdown, Plotly's labels, CSV cells.

A run's error, its spec's strings (a dataset `csv:PATH`, a model, an algorithm of another engine version),
a sweep's name, a CSV file's name, column names and cells, an imported archive's contents and an exception's
message can hold anything. Streamlit renders Markdown in every text element, label and tooltip, images
included: `![](http://host/x.png)` in a run's error would make the browser fetch that address. So every such
string goes through `literal` (or `code`) before it is interpolated into Markdown, through `plotly_text`
before it reaches a chart, and every CSV the app offers is written by `csv_bytes`
(its cells through `cache.archive.csv_cells.csv_cell`, the rule the run archive's metrics CSV follows too).

Pure functions (no Streamlit).
"""

import html
import re
import string
import time
from typing import Any

import pandas as pd

from cache.archive.csv_cells import csv_cell  # the one rule for every CSV the lab writes

MAX_CHARS = 2000  # longer untrusted text is cut, with a note saying how much
PUNCTUATION = frozenset(string.punctuation)  # CommonMark: any ASCII punctuation character may be backslash-escaped
WORD_JOINER = "\u2060"  # invisible: breaks the patterns Streamlit replaces in text after parsing
# Streamlit turns `:name:` shortcodes (emoji, `:material_x:` icons, `:streamlit:`) and `->`, `<=`, `--`…
# into symbols in the parsed text, where backslash escapes are already gone: a word joiner inside breaks them.
SHORTCODE = re.compile(r":(?=[\w+-][\w+-]*:)")
JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"  # JavaScript's \s
TYPOGRAPHY = re.compile(f"(?:(?<=[{JS_SPACE}])|\\A)(<->|->|<-|--|>=|<=|~=)(?=[{JS_SPACE}]|\\Z)")
# GitHub-flavoured Markdown links bare addresses (http://…, www.…, name@host…) in parsed text, escapes or not.
AUTOLINK = re.compile(r"(?i)(https?:)(?=//)|(www)(?=\.)|(@)(?=[-\w])")
ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:  # an object whose __str__ fails is still shown as something
        return "?"


def _cut(text: str, limit: int) -> tuple[str, str]:
    """The text up to `limit` characters, and the note that says how many were cut ('' when none)."""
    if len(text) <= limit:
        return text, ""
    return text[:limit], f" … ({len(text) - limit:,} more characters not shown)"


def literal(value: Any, *, limit: int = MAX_CHARS) -> str:
    """Markdown that Streamlit renders as exactly the text of `value` (cut to `limit` characters): every
    ASCII punctuation character backslash-escaped, so no image, link, HTML, emphasis, heading, list, table,
    code, math (`$`), colour directive (`:red[…]`) or icon (`:material/…:`) can start; shortcodes, arrows and
    bare web and mail addresses get an invisible word joiner (see SHORTCODE, TYPOGRAPHY, AUTOLINK), so that
    Streamlit makes no icon, emoji, symbol or link of them either."""
    text, note = _cut(_text(value), limit)
    text = SHORTCODE.sub(":" + WORD_JOINER, text)
    text = TYPOGRAPHY.sub(lambda m: m.group(1)[0] + WORD_JOINER + m.group(1)[1:], text)
    text = AUTOLINK.sub(lambda m: m.group() + WORD_JOINER, text)
    return "".join("\\" + c if c in PUNCTUATION else c for c in text) + note


def code(value: Any, *, limit: int = MAX_CHARS) -> str:
    """A Markdown code span showing the text of `value` on one line, whatever it holds: fenced by one
    backtick more than its longest run of backticks, padded where it starts or ends with one."""
    text, note = _cut(_text(value), limit)
    text = " ".join(text.splitlines()) or " "
    text = text.replace(":material/", ":" + WORD_JOINER + "material/")  # Streamlit rewrites it even in code
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.strip(" ") and (text[0] in "` " or text[-1] in "` ") else ""
    return f"{fence}{pad}{text}{pad}{fence}{note}"


def unescape(markdown: str) -> str:
    """The text a `literal` renders as (its inverse): backslash escapes and word joiners removed."""
    return ESCAPED.sub(r"\1", markdown).replace(WORD_JOINER, "")


def plotly_text(value: Any, *, limit: int = MAX_CHARS) -> str:
    """Text for a Plotly legend, label, title or hover template: `&`, `<` and `>` escaped (Plotly renders a
    subset of HTML, links included) and `%{` broken (a hover template would substitute it)."""
    text, note = _cut(_text(value), limit)
    return html.escape(text, quote=False).replace("%{", "%" + WORD_JOINER + "{") + note


def timestamp_text(seconds: Any, pattern: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A record's time (seconds since the epoch) in local time; '' for none, '?' for one no calendar holds (an
    archive may say 1e300)."""
    if seconds is None or isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return ""
    try:
        return time.strftime(pattern, time.localtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "?"


def csv_bytes(table: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV (no index), every cell and column name through `csv_cell`."""
    safe = table.map(csv_cell).rename(columns=csv_cell)
    return safe.to_csv(index=False).encode()

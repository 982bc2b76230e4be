"""Text a spec may hold: every string of a run spec or a grid spec (keys included, at any depth) is checked here
before anything else reads it, for every door (the command line, the notebook API, the dashboard's forms).

Refused: the NUL character (U+0000), which no path, SQLite text or C string carries intact, and unpaired UTF-16
surrogates (U+D800–U+DFFF alone, as JSON's "\\ud800" escape gives), which no UTF-8 encoder accepts, so the store,
a file name or a log line would fail on them long after the spec was accepted.
"""

from collections.abc import Mapping
from typing import Any

from engine.privacy.limits import brief

ALLOWED_TEXT = "text without NUL characters (U+0000) or unpaired surrogates (U+D800–U+DFFF)"


def text_problem(text: str) -> str | None:
    """What is wrong with `text` (None: nothing)."""
    if "\x00" in text:
        return f"must be {ALLOWED_TEXT}; it holds a NUL at character {text.index(chr(0)) + 1:,}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"must be {ALLOWED_TEXT}; it holds {text[exc.start]!r} at character {exc.start + 1:,}"
    return None


def bad_text(value: Any, field: str) -> tuple[str, str] | None:
    """The first string in the JSON value `value` (named `field`) that `text_problem` refuses, as (the field that
    holds it, the problem), or None. A refused key is named by its parent and its brief repr."""
    stack: list[tuple[Any, str]] = [(value, field)]
    while stack:
        item, name = stack.pop()
        if isinstance(item, str):
            if (problem := text_problem(item)) is not None:
                return name, problem
        elif isinstance(item, Mapping):
            for key, inner in reversed(list(item.items())):
                key_text = key if isinstance(key, str) else str(key)
                if (problem := text_problem(key_text)) is not None:
                    return f"{name}: key {brief(key_text, 40)}" if name else f"key {brief(key_text, 40)}", problem
                stack.append((inner, f"{name}.{key_text}" if name else key_text))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{name}[{i}]") for i, inner in reversed(list(enumerate(item))))
    return None

"""Streamlit AppTest helpers the page tests share: opening the app on a page, and reading its metrics, errors
and charts back."""

import json

from streamlit.testing.v1 import AppTest

from app.common.safe_text import unescape
from tests.helpers import ROOT

MAIN = str(ROOT / "app" / "main.py")


def open_page(page: str) -> AppTest:
    """The app switched to `views/<page>.py`, which must have run without an exception."""
    at = open_page_unchecked(page)
    assert not at.exception, at.exception
    return at


def open_page_unchecked(page: str) -> AppTest:
    """The app switched to `views/<page>.py`, whatever happened there (the test looks at it itself)."""
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page(f"views/{page}.py").run()
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def errors(at: AppTest) -> list[str]:
    """The errors as they read: untrusted text in them is backslash-escaped Markdown (`safe_text.literal`)."""
    return [unescape(e.value) for e in at.error]


def error_text(at: AppTest) -> str:
    """The errors' raw Markdown, joined by spaces; the script must have run without an exception."""
    assert not at.exception, at.exception
    return " ".join(e.value for e in at.error)


def chart_specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def chart_titles(at: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in chart_specs(at)]

"""Untrusted text never becomes markup, and no record a store can hold breaks a page.

`app.safe_text`: Markdown that renders as exactly the text given (every ASCII punctuation character
backslash-escaped, Streamlit's text-level shortcodes broken), a code span for any text, Plotly labels with
their HTML escaped, CSV cells a spreadsheet will not run as formulas. Then the pages, under AppTest, with a
hostile store (a run's error, an imported run's spec, a sweep's name and grid full of Markdown and HTML), and
with random records of exactly the shape an import admits (`engine.jobs.run_schema.check_shown_fields`).
"""

import io
import json
import math
import re
import string
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from app.common.labels import run_label
from app.common.run_panel import spec_caption
from app.common.safe_text import (
    JS_SPACE,
    MAX_CHARS,
    WORD_JOINER,
    code,
    csv_bytes,
    csv_cell,
    literal,
    plotly_text,
    timestamp_text,
    unescape,
)
from app.compare.frames import comparison_table
from cache import RunEvent, RunRecord, RunStatus, Store
from cache.archive.format import ArchivedRun, ArchivedSweep, SweepMember
from cache.store.archive_io import insert_runs
from engine.jobs.run_schema import RESULT_REQUIRED, SPEC_STRINGS, check_shown_fields
from engine.jobs.submission import submit
from engine.privacy import ACCOUNTANTS
from engine.training import DATASETS, parse_spec
from engine.training.config.keys import ALGORITHMS, RANGES, SCHEDULES
from tests.apptest_helpers import MAIN, open_page_unchecked
from tests.helpers import fast_spec

PUNCTUATION = set(string.punctuation)

# ---------------------------------------------------------------------------------------- the helpers


def unescaped_punctuation(markdown: str) -> list[str]:
    """The ASCII punctuation characters of `markdown` that no backslash escapes (CommonMark §2.4: an escaped
    one is a literal character; only an unescaped one can start markup)."""
    found, i = [], 0
    while i < len(markdown):
        if markdown[i] == "\\" and i + 1 < len(markdown) and markdown[i + 1] in PUNCTUATION:
            i += 2
            continue
        if markdown[i] in PUNCTUATION:
            found.append(markdown[i])
        i += 1
    return found


def parsed_text(markdown: str) -> str:
    """What a text node holds once the Markdown is parsed: the escapes resolved (word joiners kept)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


# Streamlit's own passes over the text (frontend StreamlitMarkdown): shortcodes, icons, its logo, arrows and bare
# addresses (GFM autolink literals) are replaced in parsed text nodes, where the backslash escapes are gone;
# `:material/` is rewritten before parsing. (Checked once in Chromium: each HOSTILE_CASES text rendered through
# st.markdown, st.error, st.caption, a widget label and a metric label shows exactly that text, with no link,
# image, math, icon or formatting element.)
TEXT_NODE_PATTERNS = (
    re.compile(r":(?!material/|streamlit:)[\w+-][\w_+-]*:"),  # emoji shortcodes (remark-emoji)
    re.compile(r":material_(\w+):"),
    re.compile(r":streamlit:"),
    re.compile(f"(^|[{JS_SPACE}])(<->|->|<-|--|>=|<=|~=)([{JS_SPACE}]|$)"),
    re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.IGNORECASE),  # GFM's bare-address links
    re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)"),
)


def assert_renders_literally(text: str) -> None:
    markdown = literal(text)
    assert unescaped_punctuation(markdown) == [], markdown
    assert ":material/" not in markdown  # Streamlit rewrites it to an icon before parsing
    node = parsed_text(markdown)
    assert not any(p.search(node) for p in TEXT_NODE_PATTERNS), node
    assert node.replace(WORD_JOINER, "") == text  # the text shown, character for character
    assert unescape(markdown) == text


def test_every_ascii_punctuation_character_is_escaped():
    for character in string.punctuation:
        assert literal(character) == "\\" + character
    assert_renders_literally(string.punctuation)
    assert literal("plain words 123 ε ≤ 1") == "plain words 123 ε ≤ 1"


HOSTILE_CASES = {
    "image": "![x](http://127.0.0.1:9/x.png)",
    "link": "[link](http://evil)",
    "reference link": "[x][y]\n\n[y]: http://evil",
    "autolink": "<http://evil> www.evil.com a@b.example",
    "material icon": ":material/home:",
    "material icon, rewritten form": ":material_home:",
    "emoji shortcode": ":smile: :+1:",
    "streamlit logo": ":streamlit:",
    "colour directive": ":red[alarm] :blue-background[x] :small[y]",
    "inline LaTeX": "$x^2$",
    "display LaTeX": "$$\\int_0^1 x\\,dx$$",
    "HTML": '<img src=x onerror="alert(1)"> <a href="http://evil">x</a> &amp; &#60;',
    "emphasis": "*a* _b_ **c** __d__ ~~e~~",
    "heading": "# title\n## sub\ntitle\n===",
    "list": "- a\n* b\n+ c\n1. d\n2) e",
    "quote": "> quoted",
    "table": "| a | b |\n|---|---|\n| 1 | 2 |",
    "code": "`code` ```fence``` ~~~tilde~~~",
    "backslashes": "C:\\path\\to\\file \\*",
    "typography": "a -> b <- c <-> d -- e >= f <= g ~= h",
    "the issue's error": "![x](http://127.0.0.1:9/x.png) [link](http://evil) :material/home: $x^2$ <img src=x>",
}


@pytest.mark.parametrize("case", list(HOSTILE_CASES))
def test_markup_of_every_kind_renders_as_its_text(case):
    assert_renders_literally(HOSTILE_CASES[case])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_characters=WORD_JOINER), max_size=MAX_CHARS))
def test_any_text_renders_as_itself(text):
    assert_renders_literally(text)


def test_long_text_is_cut_with_a_note():
    assert literal("a" * 2500) == "a" * MAX_CHARS + " … (500 more characters not shown)"
    assert literal("a" * 30, limit=10) == "a" * 10 + " … (20 more characters not shown)"
    assert literal("a" * MAX_CHARS) == "a" * MAX_CHARS
    assert literal(None) == "None" and literal(ValueError("bad: *x*")) == "bad\\: \\*x\\*"


def code_content(span: str) -> str:
    """The text a CommonMark code span shows (one line): between its fences, one padding space stripped."""
    fence = re.match(r"`+", span).group()
    assert span.endswith(fence) and not span.endswith("`" + fence)
    inner = span[len(fence) : -len(fence)]
    assert fence not in inner  # no backtick run as long as the fence inside: nothing closes it early
    if inner.startswith(" ") and inner.endswith(" ") and inner.strip(" "):
        inner = inner[1:-1]
    return inner


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.characters(exclude_characters=WORD_JOINER + "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
        min_size=1,
        max_size=200,
    )
)
def test_a_code_span_shows_any_text(text):
    assert code_content(code(text)).replace(WORD_JOINER, "") == text


def test_code_spans_of_awkward_text():
    assert code("plain") == "`plain`"
    assert code("a`b") == "``a`b``"
    assert code("``x`") == "``` ``x` ```"
    assert code_content(code(" x ")) == " x "
    assert code("two\nlines") == "`two lines`"
    assert ":material/" not in code(":material/home:")


def test_plotly_labels_escape_html_and_templates():
    assert plotly_text('<a href="http://evil">x</a> & <img src=x>') == (
        '&lt;a href="http://evil"&gt;x&lt;/a&gt; &amp; &lt;img src=x&gt;'
    )
    assert "%{" not in plotly_text("%{x} %{customdata[0]}")
    assert plotly_text("digits/logreg · ε 1.00") == "digits/logreg · ε 1.00"


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralized():
    hostile = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]
    assert [csv_cell(v) for v in hostile] == ["'" + v for v in hostile]
    for value in (-1.5, -3, 0, 2.5, math.inf, None, True, "digits", "a=b", " =1", "", "'quoted"):
        assert csv_cell(value) is value or csv_cell(value) == value
    table = pd.DataFrame(
        {"run": ["r1", "r2"], "error": ['=cmd|"/c calc"!A1', "fine"], "epsilon": [-1.25, 3.0], "=header": [1, 2]}
    )
    parsed = pd.read_csv(io.BytesIO(csv_bytes(table)))
    assert list(parsed.columns) == ["run", "error", "epsilon", "'=header"]
    assert list(parsed["error"]) == ['\'=cmd|"/c calc"!A1', "fine"]
    assert list(parsed["epsilon"]) == [-1.25, 3.0]  # numbers, negative ones included, stay numbers


def test_timestamps_out_of_any_calendar_read_as_a_question_mark():
    assert timestamp_text(0.0) and timestamp_text(1e300) == "?" and timestamp_text(None) == ""


def test_streamlit_keeps_the_escaped_markdown_as_given():
    """What the browser receives is exactly the escaped text (Streamlit does nothing to it in Python)."""

    def page():
        import streamlit as st

        from app.common.safe_text import literal

        HOSTILE_ERROR = "![x](http://127.0.0.1:9/x.png) [link](http://evil) :material/home: $x^2$ <img src=x>"
        st.markdown(literal(HOSTILE_ERROR))
        st.error(f"Error: {literal(HOSTILE_ERROR)}")
        st.caption(literal(HOSTILE_ERROR))
        st.selectbox(literal(HOSTILE_ERROR), ["a"], help=literal(HOSTILE_ERROR))

    at = AppTest.from_function(page)
    at.run()
    assert not at.exception
    shown = [
        at.markdown[0].value,
        at.error[0].value.removeprefix("Error: "),
        at.caption[0].value,
        at.selectbox[0].label,
        at.selectbox[0].help,
    ]
    assert shown == [literal(HOSTILE_ERROR)] * 5
    assert all(unescape(value) == HOSTILE_ERROR for value in shown)


# ---------------------------------------------------------------------------------------- pages and a hostile store

HOSTILE_ERROR = "![x](http://127.0.0.1:9/x.png) [link](http://evil) :material/home: $x^2$ <img src=x>"
HOSTILE_DATASET = "csv:/tmp/![a](http://h/i.png).csv"
HOSTILE_MODEL = "![m](http://h/m.png) <img src=x> :red[model] **bold**"
HOSTILE_SWEEP = "**sweep** ![s](http://h/s.png) <img src=x>"
HOSTILE_KEY = "![k](http://h/k.png)"
# Raw markup that must never reach a Markdown string (only its escaped form may).
RAW_MARKUP = ("![", "](http", "<img", ":material/home:", "$x^2$", "[link]", ":red[", "**bold**", "**sweep**")
MARKDOWN_FIELDS = {"body", "label", "help", "text", "delta", "caption", "placeholder"}
MARKDOWN_OPTIONS = {"radio", "select_slider", "pills", "segmented_control"}  # widgets whose options are Markdown
PLAIN = {"dataframe", "code", "json", "plotly_chart", "table"}  # shown as text, never as Markdown


def _strings(value: Any, name: str, options: bool):
    if hasattr(value, "ListFields"):
        for field, item in value.ListFields():
            yield from _strings(item, field.name, options)
    elif isinstance(value, str):
        if name in MARKDOWN_FIELDS or (options and name == "options"):
            yield value
    elif not isinstance(value, bytes | int | float | bool):  # a repeated field
        for item in value:
            yield from _strings(item, name, options)


def markdown_strings(at: AppTest) -> list[str]:
    """Every string the page sends to be rendered as Markdown: bodies, labels, tooltips, captions, progress
    texts, metric values, expander labels, radio options (not selectbox options: those are plain text)."""
    found: list[str] = []

    def walk(node) -> None:
        kind = getattr(node, "type", None)
        proto = getattr(node, "proto", None)
        if proto is not None and kind not in PLAIN:
            found.extend(_strings(proto, "", kind in MARKDOWN_OPTIONS))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return found


def chart_strings(at: AppTest) -> list[str]:
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            found.append(value)

    for chart in at.get("plotly_chart"):
        walk(json.loads(chart.proto.spec))
    return found


def unescaped_occurrence(raw: str, text: str) -> bool:
    """`raw` occurs in `text` with its first character not backslash-escaped (`\\<img` is text, `<img` a tag)."""
    return any(i == 0 or text[i - 1] != "\\" for i in (m.start() for m in re.finditer(re.escape(raw), text)))


def without_code_spans(text: str) -> str:
    """The Markdown without its code spans (their content is shown literally, as `safe_text.code` makes them)."""
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", text)


def assert_no_raw_markup(at: AppTest) -> list[str]:
    assert not at.exception, at.exception
    texts = markdown_strings(at)
    for text in texts:
        for raw in RAW_MARKUP:
            assert not unescaped_occurrence(raw, without_code_spans(text)), (raw, text)
    for text in chart_strings(at):
        assert "<img" not in text and "<a " not in text, text  # Plotly renders a subset of HTML
    return texts


def valid_result(**changes) -> dict[str, Any]:
    result = {
        "algorithm": "dpsgd",
        "private": True,
        "test_accuracy": 0.5,
        "test_loss": 1.0,
        "epsilon": 1.5,
        "delta": 1e-5,
        "noise_multiplier": 1.1,
        "sampling_rate": 0.04,
        "steps": 30,
        "planned_steps": 30,
        "accountant": "pld",
        "epsilons": {"rdp": 1.7, "pld": 1.5, "naive": math.inf},
        "best_order": 8.0,
        "order_at_edge": False,
        "privacy_statement": "line one\nline two",
        "stopped_early": False,
        "seconds": 2.0,
        "device": "cpu",
    }
    assert set(RESULT_REQUIRED) <= set(result)
    return result | changes


def archived(
    run_id: str,
    *,
    status=RunStatus.FINISHED,
    spec=None,
    plan=None,
    result=None,
    error=None,
    engine_version="0.0-elsewhere",
    created_at=1.7e9,
    events=(),
    progress_step=30,
    total_steps=30,
) -> ArchivedRun:
    spec = spec if spec is not None else fast_spec()
    check_shown_fields(status=status, spec=spec, plan=plan, result=result)  # exactly what an import admits
    return ArchivedRun(
        id=run_id,
        cache_key=f"{engine_version}:{run_id}",
        engine_version=engine_version,
        status=status,
        spec=spec,
        plan=plan,
        result=result,
        error=error,
        created_at=created_at,
        started_at=None,
        finished_at=None,
        progress_step=progress_step,
        total_steps=total_steps,
        attempts=1,
        events=tuple(events),
    )


def hostile_store(store: Store) -> dict[str, str]:
    """A local run failed with a hostile error, an imported one with a hostile spec, result and engine, and a
    sweep with a hostile name and grid."""
    failed = submit(store, parse_spec(fast_spec(seed=99))).run_id
    assert store.claim_next("hostile <img src=x> worker").id == failed
    store.finish(failed, status=RunStatus.FAILED, error=HOSTILE_ERROR, worker="hostile <img src=x> worker")
    spec = fast_spec(dataset=HOSTILE_DATASET, model=HOSTILE_MODEL) | {HOSTILE_KEY: HOSTILE_ERROR}
    result = valid_result(
        privacy_statement=f"{HOSTILE_ERROR}\n# {HOSTILE_MODEL}",
        accountant=HOSTILE_KEY,
        epsilons={HOSTILE_KEY: 1.5, "rdp": 1.7},
        device=HOSTILE_ERROR,
    )
    event = RunEvent(
        run_id="imported-1", seq=1, at=1.7e9, status=RunStatus.FINISHED, worker=HOSTILE_ERROR, detail=HOSTILE_ERROR
    )
    run = archived(
        "imported-1",
        spec=spec,
        plan={"noise_multiplier": 1.1, "sampling_rate": 0.04},
        result=result,
        error=HOSTILE_ERROR,
        engine_version="9.9 ![v](http://h/v.png)",
        events=[event],
    )
    member = SweepMember(position=0, run_id="imported-1", point={HOSTILE_KEY: "<img src=x>", "seed": 0})
    sweep = ArchivedSweep(
        id="sweep-1",
        name=HOSTILE_SWEEP,
        spec={"grid": {HOSTILE_KEY: ["<img src=x>", 2]}},
        created_at=1.7e9,
        members=(member,),
    )
    insert_runs(store, [run], sweeps=[sweep])
    return {"failed": failed, "imported": "imported-1"}


def train_page(run_id: str) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params["run"] = run_id
    at.run()
    return at


def test_hostile_records_are_shown_only_escaped_on_every_page(home, store):
    ids = hostile_store(store)
    escaped_error = literal(HOSTILE_ERROR)

    page = open_page_unchecked("runs")
    seen = assert_no_raw_markup(page)
    for run_id in ids.values():
        page.selectbox(key="open_run").set_value(run_id).run()
        seen += assert_no_raw_markup(page)
    assert any(f"Error: {escaped_error}" == text for text in seen)  # the failed run's error, escaped
    assert any(literal(HOSTILE_MODEL) in text for text in seen)  # the imported run's caption
    assert any(text.startswith(f"- {escaped_error}") for text in seen)  # its privacy statement
    assert any("Imported from an archive" in text for text in seen)

    compare = open_page_unchecked("compare")
    assert_no_raw_markup(compare)
    compare.multiselect(key="compare_runs").set_value(list(ids.values())).run()
    assert_no_raw_markup(compare)
    assert any(" · imported · " in label for label in compare.multiselect(key="compare_runs").options)

    sweep = open_page_unchecked("sweep")
    assert_no_raw_markup(sweep)
    assert sweep.selectbox(key="sweep_shown").value == "sweep-1"
    assert any("&lt;img src=x&gt;" in text for text in chart_strings(sweep))  # the grid value, as text

    for name, run_id in ids.items():
        train = train_page(run_id)
        shown = assert_no_raw_markup(train)
        assert any(run_id in text for text in shown), name
    assert any(f"Error: {escaped_error}" == text for text in markdown_strings(train_page(ids["failed"])))

    missing = train_page("![q](http://h/q.png)")  # a crafted link to the Train page
    assert_no_raw_markup(missing)
    assert any("is not in the store" in w.value for w in missing.warning)


def test_a_csv_upload_with_markup_in_its_name_and_columns_is_shown_escaped(home):
    name = "![f](http://h/f.png) :red[x].csv"
    header = ["![c](http://h/c.png)", "<img src=x>", "**bold**", "label"]
    rows = [f"{i},{i % 7},{'ab'[i % 2]},{'yes' if i % 3 else 'no'}" for i in range(30)]
    data = (",".join(header) + "\n" + "\n".join(rows) + "\n").encode()
    at = open_page_unchecked("data")
    at.file_uploader(key="data_upload").set_value((name, data, "text/csv")).run()
    texts = assert_no_raw_markup(at)
    assert any(f"**{literal(name)}**: 30 data rows" in text for text in texts)
    hint = literal("Column “![c](http://h/c.png)” is numeric: declare its")  # bounds to declare, escaped
    assert any(hint in text for text in texts)
    assert not any("schema.numeric" in text for text in texts)  # never an internal key
    assert code(header[0]) in {w.label for w in at.selectbox}  # the column's role, labelled by its name
    at.file_uploader(key="data_upload").set_value((name, b"", "text/csv")).run()  # an error naming the file
    assert any(literal(name) in e.value and "the file is empty" in e.value for e in at.error)
    assert_no_raw_markup(at)


# ---------------------------------------------------------------------------------------- any record import admits

TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=30)
STRINGS = st.one_of(TEXT, st.sampled_from([HOSTILE_ERROR, HOSTILE_MODEL, "", '=HYPERLINK("x")', "a/b/c"]))
INTEGERS = st.integers(-(2**53), 2**53)
FINITE = st.one_of(INTEGERS, st.floats(allow_nan=False, allow_infinity=False))
AT_LEAST_ZERO = st.one_of(st.integers(0, 2**53), st.floats(min_value=0, allow_nan=False))  # +inf included
JSON = st.recursive(
    st.none() | st.booleans() | FINITE | STRINGS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
TIMES = st.floats(min_value=0, max_value=1e300, allow_nan=False)
KNOWN_SPEC_KEYS = {*RANGES, *SPEC_STRINGS, *SCHEDULES, "hidden", "schema"}
PLAN_KEYS = ("noise_multiplier", "sampling_rate", "steps", "n_train", "eta", "query_epsilon", "delta", "epsilon")


@st.composite
def specs(draw) -> dict[str, Any]:
    spec = {
        "dataset": draw(st.one_of(st.sampled_from(list(DATASETS)), STRINGS, STRINGS.map(lambda s: "csv:" + s))),
        "model": draw(st.one_of(st.sampled_from(["logreg", "mlp", "cnn", "stumps", "experts"]), STRINGS)),
        "algorithm": draw(st.one_of(st.sampled_from(ALGORITHMS), STRINGS)),
    }
    for key, limits in RANGES.items():
        if draw(st.booleans()):
            spec[key] = draw(INTEGERS if limits.integer else FINITE)
    for key in SPEC_STRINGS[3:]:
        if draw(st.integers(0, 3)) == 0:
            spec[key] = draw(STRINGS)
    if draw(st.booleans()):
        spec["hidden"] = draw(st.lists(INTEGERS, max_size=3))
    for key in (*SCHEDULES, "schema"):
        if draw(st.integers(0, 3)) == 0:
            spec[key] = draw(st.one_of(st.just({"kind": "constant"}), st.dictionaries(TEXT, JSON, max_size=3)))
    spec |= draw(st.dictionaries(TEXT.filter(lambda k: k not in KNOWN_SPEC_KEYS), JSON, max_size=3))
    return spec


@st.composite
def plans(draw) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    keys = st.one_of(st.sampled_from(PLAN_KEYS), TEXT.filter(lambda k: k not in ("algorithm", "noise_phases")))
    plan = draw(st.dictionaries(keys, FINITE, max_size=5))
    if draw(st.booleans()):
        plan["algorithm"] = draw(STRINGS)
    if draw(st.booleans()):
        plan["noise_phases"] = draw(st.lists(st.lists(FINITE, max_size=2), max_size=3))
    return plan


@st.composite
def results(draw) -> dict[str, Any]:
    maybe = lambda strategy: st.one_of(st.none(), strategy)  # noqa: E731
    result = {
        "algorithm": draw(st.one_of(st.sampled_from(ALGORITHMS), STRINGS)),
        "private": draw(st.booleans()),
        "test_accuracy": draw(st.one_of(st.floats(0, 1), st.sampled_from([0, 1]))),
        "test_loss": draw(AT_LEAST_ZERO),
        "epsilon": draw(maybe(st.one_of(AT_LEAST_ZERO, st.just(math.inf)))),
        "delta": draw(maybe(AT_LEAST_ZERO)),
        "noise_multiplier": draw(maybe(AT_LEAST_ZERO)),
        "sampling_rate": draw(AT_LEAST_ZERO),
        "steps": draw(st.integers(0, 2**53)),
        "planned_steps": draw(st.integers(0, 2**53)),
        "accountant": draw(maybe(st.one_of(st.sampled_from(list(ACCOUNTANTS)), STRINGS))),
        "epsilons": draw(
            st.dictionaries(st.one_of(st.sampled_from(list(ACCOUNTANTS)), TEXT), AT_LEAST_ZERO, max_size=4)
        ),
        "best_order": draw(maybe(AT_LEAST_ZERO)),
        "order_at_edge": draw(st.booleans()),
        "privacy_statement": draw(st.one_of(STRINGS, st.lists(STRINGS, max_size=3).map("\n".join))),
        "stopped_early": draw(st.booleans()),
        "seconds": draw(AT_LEAST_ZERO),
        "device": draw(STRINGS),
    }
    if draw(st.booleans()):
        numbers = st.fixed_dictionaries(
            {k: FINITE for k in ("members", "lead_seed", "joint_epsilon_rdp", "joint_delta")}
        )
        joint = st.fixed_dictionaries(
            {
                "members": FINITE,
                "lead_seed": FINITE,
                "joint_delta": FINITE,
                "joint_epsilon": st.one_of(AT_LEAST_ZERO, st.just(math.inf)),
                "joint_accountant": st.one_of(st.sampled_from(list(ACCOUNTANTS)), STRINGS),
            }
        )
        result["stack"] = draw(st.one_of(st.none(), numbers, joint))  # an engine < 0.4.0's stack, or this one's
    newer = TEXT.filter(lambda k: k not in result and k != "stack")  # fields of a newer engine
    result |= draw(st.dictionaries(newer, JSON, max_size=2))
    return result


@st.composite
def runs(draw, run_id: str) -> ArchivedRun:
    status = draw(st.sampled_from([RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED]))
    result = draw(results()) if status is RunStatus.FINISHED or draw(st.booleans()) else None
    events = [
        RunEvent(
            run_id=run_id,
            seq=seq,
            at=draw(TIMES),
            status=status,
            worker=draw(st.none() | STRINGS),
            detail=draw(st.none() | STRINGS),
        )
        for seq in range(draw(st.integers(0, 2)))
    ]
    return archived(
        run_id,
        status=status,
        spec=draw(specs()),
        plan=draw(plans()),
        result=result,
        error=draw(st.none() | STRINGS),
        engine_version=draw(st.sampled_from(["0.1.0", "99.0-future", HOSTILE_MODEL])),
        created_at=draw(TIMES),
        events=events,
        progress_step=draw(st.integers(0, 2**53)),
        total_steps=draw(st.none() | st.integers(0, 2**53)),
    )


@st.composite
def stores(draw) -> tuple[list[ArchivedRun], ArchivedSweep]:
    count = draw(st.integers(1, 3))
    records = [draw(runs(f"run-{i}")) for i in range(count)]
    grid = draw(st.one_of(st.dictionaries(STRINGS, st.lists(JSON, max_size=3), max_size=2), JSON))
    members = tuple(
        SweepMember(position=i, run_id=r.id, point=draw(st.dictionaries(STRINGS, JSON, max_size=3)))
        for i, r in enumerate(records)
    )
    sweep = ArchivedSweep(
        id="sweep-0", name=draw(st.none() | STRINGS), spec={"grid": grid}, created_at=draw(TIMES), members=members
    )
    return records, sweep


SLOW_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=SLOW_OK)
@given(stores())
def test_every_page_survives_any_record_an_import_admits(monkeypatch, generated):
    records, sweep = generated
    for run in records:  # the test covers exactly what an import admits (and `archived` checked it)
        check_shown_fields(status=run.status, spec=run.spec, plan=run.plan, result=run.result)
    with tempfile.TemporaryDirectory() as folder:
        monkeypatch.setenv("DPLAB_HOME", folder)
        store = Store(Path(folder) / "runs.sqlite3")
        insert_runs(store, records, sweeps=[sweep])
        ids = [run.id for run in records]

        for record in store.list_runs():  # the pure helpers first: their failures are easier to read
            spec_caption(record.spec)
            run_label(record)
        comparison_table(store.list_runs())

        page = open_page_unchecked("runs")
        assert not page.exception, page.exception
        for run_id in ids:
            page.selectbox(key="open_run").set_value(run_id).run()
            assert not page.exception, (run_id, page.exception)
        compare = open_page_unchecked("compare")
        compare.multiselect(key="compare_runs").set_value(ids).run()
        assert not compare.exception, compare.exception
        sweep_page = open_page_unchecked("sweep")
        assert not sweep_page.exception, sweep_page.exception
        for run_id in ids:
            train = train_page(run_id)
            assert not train.exception, (run_id, train.exception)


def test_a_record_of_another_shape_still_gets_a_label_and_caption():
    """Records a store could hold from an older release, typed outside the schema: '?' and '–', never a crash."""
    spec = {
        "dataset": ["not", "text"],
        "model": 3,
        "algorithm": {"x": 1},
        "clip_norm": "1",
        "epochs": None,
        "lot_size": "64",
        "seed": 1.5,
        "delta": "1e-5",
    }
    run = RunRecord(
        id="odd",
        cache_key="k",
        spec=spec,
        engine_version="0",
        status=RunStatus.FINISHED,
        created_at=1e300,
        started_at=None,
        finished_at=None,
        heartbeat_at=None,
        worker=None,
        total_steps=None,
        progress_step=0,
        plan={"noise_multiplier": "x"},
        result={"epsilon": "1", "test_accuracy": None, "epsilons": [1]},
        error=None,
        cancel_requested=False,
    )
    assert spec_caption(spec) == "? · ? · ? · C=? · lot ? · ? epochs · lr ? · seed 1.5"
    assert run_label(run) == "? · ? · seed 1.5 · ε ∞ (non-private) · acc – · odd"
    table = comparison_table([run])
    assert table.loc[0, "created"] == "?" and table.loc[0, "epsilon"] == "1"

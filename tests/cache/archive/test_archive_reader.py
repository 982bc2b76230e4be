"""The streaming pieces of the archive reader: a JSON array decoded element by element from text chunks cut
anywhere, metric lines of bounded length; and the store migration that stops old imports answering."""

import itertools
import json
import sqlite3
from contextlib import closing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache import Store
from cache.archive.format import ArchiveError
from cache.archive.reader import MAX_METRIC_LINE, _lines, json_array
from cache.store.schema import MIGRATIONS

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(JSON, max_size=6),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    indent=st.sampled_from([None, 0, 2]),
)
def test_a_json_array_decodes_the_same_however_its_text_is_cut(values, cuts, indent):
    text = json.dumps(values, indent=indent)
    assert list(json_array(iter(chunked(text, cuts)), where="runs.json")) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "runs.json: runs: must be a list; got nothing"),
        ("{}", "runs: must be a list; got an object"),
        ("7", "runs: must be a list; got a number"),
        ("[1, 2", r"not valid JSON \(Expecting ',' delimiter at line 1 column 6\)"),
        ("[1,\n 2,]", r"not valid JSON \(Expecting value at line 2 column 4\)"),
        ("[1 2]", r"not valid JSON \(Expecting ',' delimiter at line 1 column 4\)"),
        ("[1] x", r"not valid JSON \(Extra data at line 1 column 5\)"),
        ('[{"a": 1, "a": 2}]', 'repeats the key "a"'),
        ("[" + "1" * 200 + "]", "an integer of 200 digits"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_a_malformed_json_array_is_named_with_its_line_and_column(text, message):
    with pytest.raises(ArchiveError, match=message):
        list(json_array(iter(chunked(text, [3, 7, 11])), where="runs.json"))


def test_an_element_larger_than_the_limit_is_refused_without_reading_on(monkeypatch):
    monkeypatch.setattr("cache.archive.reader.MAX_ELEMENT_BYTES", 1000)
    chunks = iter(['[{"a": "', "x" * 600, "x" * 600, "x" * 600, '"}]'])
    with pytest.raises(ArchiveError, match="larger than 1,000 characters"):
        list(json_array(chunks, where="runs.json"))
    assert next(chunks) == "x" * 600, "the reader stopped one chunk past the limit"


def test_metric_lines_are_bounded():
    assert list(_lines(iter(["step,name,value\n0,a,1", "\n1,a,2\n"]), where="m")) == [
        "step,name,value",
        "0,a,1",
        "1,a,2",
    ]
    with pytest.raises(ArchiveError, match=f"longer than {MAX_METRIC_LINE} characters"):
        list(_lines(iter(["0,a,", "9" * (MAX_METRIC_LINE + 1)]), where="m"))


def test_imports_made_before_the_trust_choice_stop_answering_submissions(tmp_path):
    """Migration 4: a store whose imported runs kept this engine's key (they answered submissions) opens with
    those keys prefixed "imported:"; keys of other engines and of unverifiable CSV runs are left as they were."""
    path = tmp_path / "runs.sqlite3"
    with closing(sqlite3.connect(path)) as db:
        for number, migration in enumerate(MIGRATIONS[:3]):
            db.executescript(migration)
            db.execute(f"PRAGMA user_version={number + 1}")
        rows = [
            ("a", "0" * 64, 1),
            ("b", "0.1.0:" + "1" * 64, 1),
            ("c", "unverified:" + "2" * 64, 1),
            ("d", "3" * 64, 0),
        ]
        for run_id, key, imported in rows:
            db.execute(
                "INSERT INTO runs (id, cache_key, spec_json, engine_version, status, created_at, imported)"
                " VALUES (?, ?, '{}', 'e', 'finished', 0, ?)",
                (run_id, key, imported),
            )
        db.commit()
    store = Store(path)
    keys = {r: store.get_run(r).cache_key for r in "abcd"}
    assert keys == {"a": "imported:" + "0" * 64, "b": "0.1.0:" + "1" * 64, "c": "unverified:" + "2" * 64, "d": "3" * 64}
    assert store.answering_run("0" * 64) is None and store.answering_run("3" * 64) is not None

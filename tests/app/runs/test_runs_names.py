"""The Runs page under AppTest: runs read by name (table, picker, run panel, Compare's CSV), the search and each
filter narrowing the list, delete with a confirmation, and blank cells."""

import datetime as dt
import io
import math

import pandas as pd
import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

from cache import RunStatus, Store
from cache.archive.format import ArchivedRun
from cache.store.archive_io import insert_runs
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests.apptest_helpers import open_page, table_with
from tests.helpers import fast_spec

NONPRIVATE = {"dataset": "digits", "model": "logreg", "algorithm": "nonprivate", "lot_size": 64, "epochs": 3, "lr": 0.5}


def noon(year: int, month: int, day: int) -> float:
    return dt.datetime(year, month, day, 12).timestamp()  # local time: the page shows local days


def result(**changes) -> dict:
    return {
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
        "epsilons": {"rdp": 1.7, "pld": 1.5},
        "best_order": 8.0,
        "order_at_edge": False,
        "privacy_statement": "line one",
        "stopped_early": False,
        "seconds": 2.0,
        "device": "cpu",
    } | changes


def archived(run_id: str, *, spec: dict, created_at: float, res: dict | None, status=RunStatus.FINISHED, error=None):
    return ArchivedRun(
        id=run_id,
        cache_key=f"elsewhere:{run_id}",
        engine_version="0.0-elsewhere",
        status=status,
        spec=spec,
        plan=None,
        result=res,
        error=error,
        created_at=created_at,
        started_at=None,
        finished_at=None,
        progress_step=30 if res else 3,
        total_steps=30 if res else None,
        attempts=1,
    )


def lab(store: Store) -> None:
    """Four runs that differ in what each filter reads, one named by its user."""
    insert_runs(
        store,
        [
            archived(
                "dp-logreg-run",
                spec=fast_spec(seed=0),
                created_at=noon(2026, 1, 10),
                res=result(epsilon=2.5, test_accuracy=0.91),
            ),
            archived(
                "gd-mlp-run",
                spec=fast_spec(model="mlp", algorithm="noisy_gd", target_epsilon=None, noise_multiplier=2.0, seed=1),
                created_at=noon(2026, 2, 10),
                res=result(algorithm="noisy_gd", epsilon=7.0, test_accuracy=0.8),
            ),
            archived(
                "baseline-run",
                spec=NONPRIVATE | {"seed": 0},
                created_at=noon(2026, 3, 10),
                res=result(algorithm="nonprivate", private=False, epsilon=None, delta=None, test_accuracy=0.95),
            ),
            archived(
                "adult-failed-run",
                spec=fast_spec(dataset="adult", seed=2),
                created_at=noon(2026, 3, 12),
                res=None,
                status=RunStatus.FAILED,
                error="boom",
            ),
        ],
    )
    store.set_run_name("gd-mlp-run", "My favourite run")


def listed(at) -> list[str]:
    return list(table_with(at, "status")["id"])


def test_runs_read_by_name_in_the_table_the_picker_the_panel_and_the_csv(home, store, downloads):
    lab(store)
    at = open_page("runs")
    table = table_with(at, "status")
    assert list(table.columns[[0, -1]]) == ["name", "id"]  # the name first, the id last
    names = dict(zip(table["id"], table["name"], strict=True))
    assert names == {
        "dp-logreg-run": "digits · logreg · ε 3 · seed 0",
        "gd-mlp-run": "My favourite run",
        "baseline-run": "digits · logreg · non-private · seed 0",
        "adult-failed-run": "adult · logreg · ε 3 · seed 2",
    }
    labels = at.selectbox(key="open_run").options  # as shown
    assert len(labels) == 4 and any(label.startswith("My favourite run · ε 7.00 · acc 0.800") for label in labels)
    assert all(any(label.startswith(names[i]) and label.endswith(i) for label in labels) for i in names)

    at.selectbox(key="open_run").set_value("gd-mlp-run").run()
    [title] = [h.value for h in at.subheader if "finished" in h.value]
    assert "My favourite run" in title and "gd-mlp-run" not in title  # the id is a caption under it
    assert any(c.value.startswith("Run `gd-mlp-run`") for c in at.caption)

    compare = open_page("compare")
    compare.multiselect(key="compare_runs").set_value(["dp-logreg-run", "gd-mlp-run"]).run()
    csv = pd.read_csv(io.BytesIO(next(data for data, name in downloads if name == "dplab-runs.csv")))
    assert list(csv.columns[:2]) == ["name", "run"]  # the name first; the id kept
    assert list(csv["name"]) == [names[run_id] for run_id in csv["run"]]


@pytest.fixture
def downloads(monkeypatch) -> list[tuple[bytes, str | None]]:
    """Every file a page offers for download, as (data, file name)."""
    offered: list[tuple[bytes, str | None]] = []
    original = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        offered.append((path_or_data, filename))
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    return offered


def test_each_filter_narrows_the_list(home, store):
    lab(store)
    at = open_page("runs")
    assert set(listed(at)) == {"dp-logreg-run", "gd-mlp-run", "baseline-run", "adult-failed-run"}

    def only(key: str, value, expected: set[str]) -> None:
        for shown in (value, reset(key)):  # set, then cleared
            next(w for w in at.get(kind(key)) if w.key == key).set_value(shown).run()
            assert not at.exception, at.exception
            if shown is value:
                assert set(listed(at)) == expected, (key, value)
        assert len(listed(at)) == 4

    only("runs_search", "FAVOURITE", {"gd-mlp-run"})  # a part of the name, in any case
    only("runs_search", "baseline-r", {"baseline-run"})  # a part of the id
    only("runs_search", "non-private", {"baseline-run"})  # a part of a generated name
    only("runs_filter", ["failed"], {"adult-failed-run"})
    only("runs_datasets", ["adult"], {"adult-failed-run"})
    only("runs_models", ["mlp"], {"gd-mlp-run"})
    only("runs_algorithms", ["nonprivate"], {"baseline-run"})
    only("runs_algorithms", ["dpsgd"], {"dp-logreg-run", "adult-failed-run"})
    # ε spent: finished runs only; a non-private run spent ∞ (kept by a lower bound, dropped by an upper one)
    only("runs_epsilon_high", 5.0, {"dp-logreg-run"})
    only("runs_epsilon_low", 5.0, {"gd-mlp-run", "baseline-run"})
    only("runs_created_from", dt.date(2026, 3, 1), {"baseline-run", "adult-failed-run"})
    only("runs_created_to", dt.date(2026, 2, 10), {"dp-logreg-run", "gd-mlp-run"})

    at.number_input(key="runs_epsilon_low").set_value(2.0).run()
    at.number_input(key="runs_epsilon_high").set_value(3.0).run()
    assert listed(at) == ["dp-logreg-run"]
    assert any(c.value.startswith("Showing 1 of 4 runs.") for c in at.caption)
    at.text_input(key="runs_search").set_value("no such run").run()
    assert not at.exception and any("No run matches" in i.value for i in at.info)


def kind(key: str) -> str:
    if key == "runs_search":
        return "text_input"
    if key.startswith("runs_epsilon"):
        return "number_input"
    if key.startswith("runs_created"):
        return "date_input"
    return "multiselect"


def reset(key: str):
    return {"text_input": "", "number_input": None, "date_input": None, "multiselect": []}[kind(key)]


def test_cells_without_a_value_are_blank(home, store):
    lab(store)
    table = table_with(open_page("runs"), "status")
    by_id = table.set_index("id")
    for value in table.drop(columns=["imported"]).to_numpy().ravel():
        assert isinstance(value, str) and value not in ("None", "nan"), value
    assert by_id.loc["adult-failed-run", "ε spent"] == "" and by_id.loc["adult-failed-run", "test accuracy"] == ""
    assert by_id.loc["baseline-run", "ε spent"] == "∞" and by_id.loc["baseline-run", "target ε"] == ""
    assert by_id.loc["gd-mlp-run", "target ε"] == "" and by_id.loc["dp-logreg-run", "ε spent"] == "2.5"
    assert by_id.loc["dp-logreg-run", "error"] == "" and by_id.loc["adult-failed-run", "error"] == "boom"
    assert not math.isnan(float(by_id.loc["baseline-run", "test accuracy"]))


def test_runs_are_deleted_only_after_the_confirmation(home, store):
    lab(store)
    queued = submit(store, parse_spec(fast_spec(seed=7))).run_id
    at = open_page("runs")
    at.multiselect(key="runs_delete_ids").set_value(["gd-mlp-run", "adult-failed-run"]).run()
    assert at.button(key="runs_delete").disabled  # nothing can be deleted before the box is ticked
    assert store.get_run("gd-mlp-run") is not None
    at.checkbox(key="runs_confirm_delete").check().run()
    at.button(key="runs_delete").click().run()
    assert not at.exception, at.exception
    remaining = {r.id for r in store.list_runs()}
    assert remaining == {"dp-logreg-run", "baseline-run", queued}
    assert any("Deleted 2 run(s)" in s.value and "My favourite run" in s.value for s in at.success)
    assert set(listed(at)) == remaining and at.multiselect(key="runs_delete_ids").value == []

    # An active run cannot be deleted: the store's rule says why, and neither box nor button can be used.
    at.multiselect(key="runs_delete_ids").set_value([queued, "baseline-run"]).run()
    assert any("Cannot delete the selection" in e.value for e in at.error)
    assert at.checkbox(key="runs_confirm_delete").disabled and at.button(key="runs_delete").disabled
    assert {r.id for r in store.list_runs()} == remaining

"""The Compare page under Streamlit's AppTest: filters, widgets and tooltips, overlaid curves, the table and its
CSV, imported runs, deleting runs."""

import io
import math
from dataclasses import replace

import pandas as pd
import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from app.common.charts import RUN_PALETTE
from app.common.labels import short_labels
from app.common.safe_text import literal, unescape
from app.compare.frames import epsilons_as_text
from cache import RunStatus, Store
from cache.archive.format import ArchivedRun
from cache.store.archive_io import insert_runs
from engine.jobs.naming import generated_run_name
from engine.jobs.release import RunToRelease, release_epsilon
from engine.jobs.submission import submit
from engine.privacy import epsilon_text
from engine.training import parse_spec
from tests.apptest_helpers import figures, open_page, widgets
from tests.helpers import fast_spec


def test_compare_page_without_runs_explains_what_to_do(home):
    at = open_page("compare")
    assert at.title[0].value == "Compare runs"
    assert any("No runs yet" in i.value for i in at.info)


@pytest.fixture
def downloads(monkeypatch) -> list[tuple[bytes, str | None]]:
    """Every file the page offers for download, as (data, file name), in the order offered."""
    offered: list[tuple[bytes, str | None]] = []
    original = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        offered.append((path_or_data, filename))
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    return offered


def select_all(at: AppTest, store: Store) -> list[str]:
    ids = [r.id for r in store.list_runs()]
    at.multiselect(key="compare_runs").set_value(ids).run()
    assert not at.exception, at.exception
    return ids


def test_compare_filters_overlays_and_tabulates_the_selected_runs(trained_store, downloads):
    store = trained_store
    at = open_page("compare")
    filters = {w.key: w for w in at.multiselect}
    assert {
        "compare_filter_dataset",
        "compare_filter_model",
        "compare_filter_algorithm",
        "compare_filter_status",
        "compare_runs",
    } <= set(filters)
    assert filters["compare_filter_dataset"].options == ["digits"]
    assert not [w.key for w in widgets(at) if not w.help]
    assert any("Choose two or more runs" in i.value for i in at.info)

    at.multiselect(key="compare_filter_status").set_value(["queued"]).run()
    assert any("No run matches these filters" in w.value for w in at.warning)
    assert at.multiselect(key="compare_runs").options == []
    at.multiselect(key="compare_filter_status").set_value([]).run()
    at.multiselect(key="compare_filter_model").set_value(["logreg"]).run()
    ids = select_all(at, store)
    assert {"compare_x", "compare_differ", "compare_csv", "compare_confirm_delete", "compare_delete"} <= {
        w.key for w in widgets(at)
    }
    assert not [w.key for w in widgets(at) if not w.help], "every widget explains itself"
    labels = at.multiselect(key="compare_runs").options
    assert all(label.startswith("digits · logreg · ") and " · acc 0." in label for label in labels)  # by name

    accuracy, epsilon, frontier_fig = figures(at)
    names = short_labels([store.get_run(i) for i in ids])  # what sets each run apart, not its hex id
    assert len(set(names.values())) == len(ids) and not any(i in names[i] for i in ids)
    [majority] = [t for t in frontier_fig["data"] if t.get("meta") == "reference"]  # no non-private run stored
    assert majority["name"].startswith("majority class: 0.") and majority["line"]["dash"] == "dash"
    for figure in (accuracy, epsilon, frontier_fig):
        runs_drawn = [t for t in figure["data"] if "meta" not in t]
        assert [t["name"] for t in runs_drawn] == [names[i] for i in ids]
        colors = [t.get("line", t.get("marker"))["color"] for t in runs_drawn]
        assert colors == list(RUN_PALETTE[: len(ids)])  # distinct, in the order of the selection
    assert all(len(t["x"]) > 2 for t in accuracy["data"] + epsilon["data"])
    results = {r.id: r.result for r in store.list_runs()}
    assert [t["x"][0] for t in frontier_fig["data"] if "meta" not in t] == [results[i]["epsilon"] for i in ids]

    table = next(d.value for d in at.dataframe if "noise_multiplier" in d.value)
    assert list(table["run"]) == ids
    expected = {
        "dataset",
        "model",
        "algorithm",
        "lot_size",
        "clip_norm",
        "delta",
        "lr",
        "epochs",
        "seed",
        "epsilon",
        "test_accuracy",
        "accountant",
        "epsilon_rdp",
        "noise_multiplier_used",
    }
    assert expected <= set(table.columns)

    at.toggle(key="compare_differ").set_value(True).run()
    differing = next(d.value for d in at.dataframe if "run" in d.value)
    assert {"run", "noise_multiplier", "epsilon", "test_accuracy"} <= set(differing.columns)
    assert not {"dataset", "model", "lot_size"} & set(differing.columns)

    at.download_button(key="compare_csv")  # present, with its help
    csv = next(data for data, name in downloads if name == "dplab-runs.csv")
    parsed = pd.read_csv(io.BytesIO(csv))
    assert list(parsed["run"]) == ids
    assert list(parsed["epsilon"]) == pytest.approx([results[i]["epsilon"] for i in ids])
    assert sorted(parsed["noise_multiplier"]) == [1.0, 2.0]


def test_delete_needs_a_confirmation_and_refuses_queued_runs(trained_store):
    store = trained_store
    queued = submit(store, parse_spec(fast_spec(epochs=1, seed=7))).run_id
    finished = store.list_runs(statuses=[RunStatus.FINISHED])
    first, second = (r.id for r in finished)
    first_name = generated_run_name(finished[0].spec)
    at = open_page("compare")
    at.multiselect(key="compare_runs").set_value([first]).run()
    assert at.button(key="compare_delete").disabled, "no delete before the confirmation"
    at.checkbox(key="compare_confirm_delete").check().run()
    assert not at.button(key="compare_delete").disabled
    at.button(key="compare_delete").click().run()
    assert not at.exception, at.exception
    assert any(f"Deleted 1 run(s): {literal(first_name)} (`{first}`)" in s.value for s in at.success)  # by name
    assert {r.id for r in store.list_runs()} == {second, queued}
    assert at.multiselect(key="compare_runs").value == []

    at.multiselect(key="compare_runs").set_value([second, queued]).run()
    assert any(f"cannot delete 1 active run(s): {queued} (queued)" in unescape(e.value) for e in at.error)
    assert at.checkbox(key="compare_confirm_delete").disabled and at.button(key="compare_delete").disabled
    assert {r.id for r in store.list_runs()} == {second, queued}


def test_compare_marks_imported_runs_and_its_csv_neutralizes_formulas(trained_store, downloads):
    store = trained_store
    local = store.list_runs()[0]
    formula = '=HYPERLINK("http://example.invalid/x","click")'
    copy = replace(
        ArchivedRun.from_record(local, store.events(local.id)),
        id="imported-run",
        error=formula,
        cache_key="imported:test",
    )
    insert_runs(store, [copy])
    at = open_page("compare")
    ids = select_all(at, store)
    labels = {label.rsplit(" · ", 1)[1]: label for label in at.multiselect(key="compare_runs").options}  # id last
    assert set(labels) == set(ids)
    assert labels["imported-run"].endswith(" · imported · imported-run")
    assert not any(" · imported" in label for run_id, label in labels.items() if run_id != "imported-run")
    table = next(d.value for d in at.dataframe if "noise_multiplier" in d.value)
    assert list(table.columns[:4]) == ["name", "run", "status", "imported"]
    assert dict(zip(table["run"], table["imported"], strict=True)) == {r: r == "imported-run" for r in ids}

    at.download_button(key="compare_csv")
    csv = next(data for data, name in downloads if name == "dplab-runs.csv")
    parsed = pd.read_csv(io.BytesIO(csv)).set_index("run")
    assert parsed.loc["imported-run", "error"] == "'" + formula  # a spreadsheet shows it as text
    assert parsed.loc[local.id, "epsilon"] == pytest.approx(local.result["epsilon"])  # numbers stay numbers


def test_a_name_given_on_the_run_panel_labels_the_run_on_compare(trained_store):
    store = trained_store
    named, other = [r.id for r in store.list_runs()]
    at = open_page("runs")
    at.selectbox(key="open_run").set_value(named).run()
    at.text_input(key=f"name-{named}").set_value("my baseline").run()
    assert not at.exception, at.exception
    assert store.run_names() == {named: "my baseline"}
    at = open_page("compare")
    assert any(label.startswith("my baseline · ") for label in at.multiselect(key="compare_runs").options)
    ids = select_all(at, store)
    accuracy, *_ = figures(at)
    names = dict(zip(ids, (t["name"] for t in accuracy["data"]), strict=True))
    assert names[named] == "my baseline" and names[other] != "my baseline"


def test_two_runs_of_one_stack_released_together_are_charged_their_joint_ledger(trained_store):
    """The tiny sweep's two runs trained in one stack (shared lots): Compare charges their joint mechanism."""
    runs = trained_store.list_runs()
    assert len({run.stack_id for run in runs}) == 1 and runs[0].stack_id is not None
    at = open_page("compare")
    select_all(at, trained_store)
    [metric] = [m for m in at.metric if m.label == "ε of releasing these runs together"]
    expected = release_epsilon([RunToRelease.of_record(r.spec, stack=r.stack_id, plan=r.plan) for r in runs])
    assert metric.value == epsilon_text(expected.epsilon) and expected.stacks == 1
    apart = release_epsilon([RunToRelease(spec=r.spec) for r in runs])
    assert expected.epsilon > apart.epsilon > max(r.result["epsilon"] for r in runs)
    assert any("trained in 1 vectorized stack" in c.value and "joint ledger" in c.value for c in at.caption)


def test_the_table_shows_an_unbounded_epsilon_as_infinity():
    frame = pd.DataFrame(
        {"run": ["a", "b"], "epsilon": [1.234567, math.inf], "epsilon_naive": [math.inf, None], "lr": [0.5, 2.0]}
    )
    shown = epsilons_as_text(frame)
    assert list(shown["epsilon"]) == ["1.235", "∞"] and list(shown["epsilon_naive"]) == ["∞", ""]
    assert list(shown["lr"]) == [0.5, 2.0]  # other columns keep their numbers
    finite = frame.assign(epsilon=[1.0, 2.0])
    assert epsilons_as_text(finite)["epsilon"].tolist() == [1.0, 2.0]  # without an ∞ the column stays numeric

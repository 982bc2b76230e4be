"""The Data page (datasets, CSV upload with a declared schema) and the Runs page (counts, filter, queue,
history, cancel, export and import) under Streamlit's AppTest."""

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import services
from app.common.safe_text import unescape
from app.services import uploads as data_upload
from cache import RunStatus, Store
from engine.jobs.queue import submit
from engine.jobs.transfer import export_runs, import_runs
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.apptest_helpers import errors, metrics, open_page
from tests.helpers import fast_spec, synthetic_csv


def table_with(at: AppTest, column: str):
    return next(d.value for d in at.dataframe if column in d.value)


# ---------------------------------------------------------------------------------------- the Data page


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="data_upload").set_value((name, data, "text/csv")).run()
    assert not at.exception, at.exception
    return at


def declare_bounds(at: AppTest, **bounds: tuple[float, float]) -> AppTest:
    for column, (low, high) in bounds.items():
        at.number_input(key=f"data_low::{column}").set_value(low)
        at.number_input(key=f"data_high::{column}").set_value(high)
    at.run()
    assert not at.exception, at.exception
    return at


def saved_files(home: Path) -> list[Path]:
    folder = home / "uploads"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_data_page_lists_the_datasets_with_their_sizes(home):
    at = open_page("data")
    assert at.title[0].value == "Data"
    table = table_with(at, "available").set_index("dataset")
    assert set(table.index) >= {"digits", "adult", "mnist", "fashion-mnist", "cifar10"}
    digits = table.loc["digits"]
    assert (digits["train"], digits["test"], digits["features"], digits["classes"]) == (1438, 359, 64, 10)
    assert digits["available"] == "built-in"
    assert {"Run store", "Downloaded datasets", "Your uploads"} <= set(metrics(at))


@pytest.mark.slow
def test_a_csv_goes_from_upload_through_its_schema_to_a_saved_dataset(home, store):
    data = synthetic_csv()
    at = upload(open_page("data"), "people.csv", data)
    assert any("200 data rows, 5 columns" in m.value for m in at.markdown)
    preview = table_with(at, "notes")
    assert list(preview.columns) == ["age", "income", "city", "notes", "label"] and len(preview) == 20
    assert at.selectbox(key="data_target").value == "label"
    roles = {c: at.selectbox(key=f"data_role::{c}").value for c in ("age", "income", "city", "notes")}
    assert roles == {"age": "numeric", "income": "numeric", "city": "categorical", "notes": "ignored"}
    assert at.text_area(key="data_classes").value == "no\nyes"
    assert at.text_area(key="data_categories::city").value == "Lyon\nOslo\nQuito"
    # Bounds are never suggested: both numeric columns wait for a declaration, and nothing can be saved yet.
    assert any("schema.numeric.age" in e and "declare the lower and upper bound" in e for e in errors(at))
    assert any("schema.numeric.income" in e for e in errors(at))
    assert at.button(key="data_save").disabled

    declare_bounds(at, age=(17, 100), income=(0, 250_000))
    assert errors(at) == []
    at.number_input(key="data_test_fraction").set_value(0.25)
    at.text_input(key="data_label").set_value("People (synthetic)").run()
    at.button(key="data_save").click().run()
    assert not at.exception and errors(at) == [], (at.exception, errors(at))
    assert any("Saved **People (synthetic)**" in unescape(s.value) for s in at.success)

    [(label, dataset, schema)] = services.uploaded_datasets()
    assert label == "People (synthetic)" and dataset.startswith("csv:")
    path = Path(dataset.removeprefix("csv:"))
    assert path.parent == (home / "uploads").resolve() and path.read_bytes() == data
    assert schema == {
        "target": "label",
        "classes": ["no", "yes"],
        "numeric": {"age": [17.0, 100.0], "income": [0.0, 250_000.0]},
        "categorical": {"city": ["Lyon", "Oslo", "Quito"]},
        "test_fraction": 0.25,
    }
    row = table_with(at, "available").set_index("dataset").loc[dataset]
    assert (row["train"], row["test"], row["features"], row["classes"]) == (150, 50, 5, 2)
    assert row["available"] == "your upload"

    spec = parse_spec(fast_spec(dataset=dataset, schema=schema, epochs=2, lot_size=32, delta=1e-3))
    assert spec.dataset == dataset and spec.data_sha256 == hashlib.sha256(data).hexdigest()
    run_id = submit(store, spec).run_id
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    assert store.get_run(run_id).status is RunStatus.FINISHED, store.get_run(run_id).error

    # Saving the same file with the same schema again changes nothing; a second schema is listed beside it.
    at.button(key="data_save").click().run()
    assert len(services.uploaded_datasets()) == 1 and len(saved_files(home)) == 2
    at.selectbox(key="data_role::city").set_value("ignored").run()
    at.button(key="data_save").click().run()
    assert len(services.uploaded_datasets()) == 2 and len(saved_files(home)) == 3


def test_a_saved_upload_is_offered_on_the_train_page_and_trains_with_its_schema(home, store):
    schema = {
        "target": "label",
        "classes": ["no", "yes"],
        "numeric": {"age": [17, 100], "income": [0, 250_000]},
        "categorical": {"city": ["Lyon", "Oslo", "Quito"]},
        "test_fraction": 0.25,
    }
    saved = data_upload.save_upload(
        home, file_name="people.csv", data=synthetic_csv(), raw_schema=schema, label="People (synthetic)"
    )
    at = open_page("train")
    options = at.selectbox(key="train_dataset").options
    assert "People (synthetic) (your upload)" in options
    at.selectbox(key="train_dataset").set_value(saved.dataset).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="train_model").options == ["Logistic regression", "MLP (one ReLU hidden layer)"]
    at.select_slider(key="train_delta").set_value(1e-4).run()  # δ below 1/N = 1/150
    at.select_slider(key="train_lot_size").set_value(32).run()
    shown = {m.label: m.value for m in at.metric}
    assert shown["Sampling rate q"] == f"{32 / 150:.4f}"  # q = L/N on the upload's training split
    at.selectbox(key="train_algorithm").set_value("noisy_gd").run()  # two classes: noisy GD may train on it
    assert at.selectbox(key="train_dataset").value == saved.dataset
    at.selectbox(key="train_algorithm").set_value("dpsgd").run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    [run] = store.list_runs()
    assert run.spec["dataset"] == saved.dataset and run.spec["schema"]["target"] == "label"
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    assert store.get_run(run.id).status is RunStatus.FINISHED, store.get_run(run.id).error


MALFORMED = {
    "empty": (b"", "the file is empty"),
    "not UTF-8": (b"age,label\n30,yes\n40,\xff\xfeno\n", "line 3 is not valid UTF-8"),
    "ragged row": (b"age,city,label\n30,Oslo,yes\n40,Lyon\n", "line 3 has 2 fields, expected 3"),
    "duplicate header": (b"age,age,label\n30,31,yes\n40,41,no\n", "duplicate column name 'age'"),
    "header only": (b"age,label\n", "a header but no data rows"),
    "one column": (b"label\nyes\nno\n", "needs a target column and at least one feature column"),
    "unbalanced quote": (b'age,label\n30,"yes\n40,no\n', "malformed CSV"),
    "binary": (b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xb7\xac\xce\x94", "not valid UTF-8"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_upload_is_explained_and_nothing_is_saved(home, case):
    data, expected = MALFORMED[case]
    at = upload(open_page("data"), f"{case}.csv", data)
    shown = errors(at)
    assert len(shown) == 1 and expected in shown[0] and f"{case}.csv" in shown[0], shown
    assert "Nothing was saved" in shown[0]
    assert "/tmp" not in shown[0] and ".partial" not in shown[0]  # the message names the upload, not a temp file
    assert not at.button  # no save button, no schema editor
    assert saved_files(home) == [] and services.uploaded_datasets() == []


def test_an_upload_over_the_size_limit_is_refused(home, monkeypatch):
    monkeypatch.setattr(data_upload, "MAX_CSV_BYTES", 1_000)
    data = synthetic_csv(rows=60, seed=1)
    at = upload(open_page("data"), "big.csv", data)
    assert any(f"{len(data):,} bytes, more than the upload limit of 1,000 bytes" in e for e in errors(at))
    assert saved_files(home) == []


def test_schema_errors_name_the_field(home):
    at = upload(open_page("data"), "people.csv", synthetic_csv(seed=2))
    declare_bounds(at, age=(100, 17), income=(0, 250_000))
    assert any("schema.numeric.age" in e and "lower < upper" in e for e in errors(at))
    assert at.button(key="data_save").disabled
    declare_bounds(at, age=(17, 100))
    at.text_area(key="data_classes").set_value("no\nno").run()
    assert any("schema.classes[1]" in e and "listed twice" in e for e in errors(at))
    at.text_area(key="data_classes").set_value("no\nyes").run()
    at.text_area(key="data_categories::city").set_value("").run()
    assert any("schema.categorical.city" in e for e in errors(at))
    at.selectbox(key="data_target").set_value("notes").run()  # every value is distinct: not a label
    assert any("schema.target" in e and "'notes' has more than 20 distinct values" in e for e in errors(at))
    assert not at.button
    assert saved_files(home) == []


def test_a_row_outside_the_declared_classes_fails_the_save_and_keeps_nothing(home):
    data = synthetic_csv(seed=3).replace(b",yes\n", b",maybe\n", 1)  # one row with a third label
    at = upload(open_page("data"), "people.csv", data)
    at.text_area(key="data_classes").set_value("no\nyes")
    declare_bounds(at, age=(17, 100), income=(0, 250_000))
    at.button(key="data_save").click().run()
    assert any("Not saved" in e and "target value 'maybe' is not one of the declared classes" in e for e in errors(at))
    assert any("people.csv: line" in e for e in errors(at))
    assert saved_files(home) == []


# ---------------------------------------------------------------------------------------- the Runs page


def finished_run(store: Store, **overrides) -> str:
    run_id = submit(store, parse_spec(fast_spec(epochs=1, **overrides))).run_id
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    assert store.get_run(run_id).status is RunStatus.FINISHED
    return run_id


def failed_run(store: Store, error: str) -> str:
    run_id = submit(store, parse_spec(fast_spec(seed=99))).run_id
    assert store.claim_next("test-worker").id == run_id
    store.finish(run_id, status=RunStatus.FAILED, error=error, worker="test-worker")
    return run_id


def queued_run(store: Store, seed: int) -> str:
    return submit(store, parse_spec(fast_spec(seed=seed))).run_id


def test_runs_page_counts_filters_and_opens_a_failed_run(home, store):
    done = finished_run(store)
    failed = failed_run(store, "training diverged: loss is NaN at step 12")
    queued = queued_run(store, seed=5)
    at = open_page("runs")
    assert {k: metrics(at)[k] for k in ("queued", "running", "finished", "failed", "cancelled")} == {
        "queued": "1",
        "running": "0",
        "finished": "1",
        "failed": "1",
        "cancelled": "0",
    }
    assert set(table_with(at, "status")["run"]) == {done, failed, queued}
    assert any(queued in m.value and "#1 in the queue" in m.value for m in at.markdown)

    at.multiselect(key="runs_filter").set_value(["failed"]).run()
    table = table_with(at, "status")
    assert list(table["run"]) == [failed] and list(table["status"]) == ["failed"]
    assert at.selectbox(key="open_run").value == failed
    assert any("training diverged: loss is NaN at step 12" in e for e in errors(at))
    history = table_with(at, "detail")
    assert list(history["status"]) == ["queued", "running", "failed"]
    assert history["detail"].iloc[-1] == "training diverged: loss is NaN at step 12"

    at.multiselect(key="runs_filter").set_value(["finished", "queued"]).run()
    assert set(table_with(at, "status")["run"]) == {done, queued}


def test_queued_runs_are_cancelled_from_the_queue(home, store):
    first, second, third = (queued_run(store, seed=s) for s in (1, 2, 3))
    at = open_page("runs")
    order = [m.value for m in at.markdown if "in the queue" in m.value]
    assert [next(r for r in (first, second, third) if r in line) for line in order] == [first, second, third]
    at.button(key=f"runs_cancel::{second}").click().run()
    assert store.get_run(second).status is RunStatus.CANCELLED
    assert any("Cancelled 1 queued run(s)" in s.value for s in at.success)
    assert metrics(at)["cancelled"] == "1" and metrics(at)["queued"] == "2"
    assert store.events(second)[-1].detail == "cancelled before it started"

    assert at.button(key="runs_cancel_all").disabled  # needs the confirmation first
    at.checkbox(key="runs_confirm_cancel_all").check().run()
    at.button(key="runs_cancel_all").click().run()
    assert {store.get_run(r).status for r in (first, third)} == {RunStatus.CANCELLED}
    assert metrics(at)["queued"] == "0" and metrics(at)["cancelled"] == "3"


def test_export_then_import_into_another_store(home, store, tmp_path, monkeypatch):
    done = finished_run(store)
    failed = failed_run(store, "boom")
    queued = queued_run(store, seed=7)
    at = open_page("runs")
    options = at.multiselect(key="runs_export_ids").options
    assert queued not in " ".join(options)  # only terminal runs can be exported
    at.multiselect(key="runs_export_ids").set_value([done, failed]).run()
    at.button(key="runs_export_prepare").click().run()
    assert not at.exception and errors(at) == []
    assert at.download_button(key="runs_export_download").label.startswith("Download 2 run(s)")
    archive = at.session_state["runs_export"][1].data
    assert zipfile.ZipFile(io.BytesIO(archive)).testzip() is None

    other = Store(tmp_path / "other.sqlite3")
    report = import_runs(other, archive)  # results computed elsewhere: records only, unless asked
    assert set(report.imported) == {done, failed} and report.cache_hits == ()
    assert other.get_run(failed).error == "boom" and other.get_run(done).imported

    # The page's import, into a third lab (a fresh data home): the checkbox to serve from the cache is unticked.
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path / "third"))
    third = open_page("runs")
    third.file_uploader(key="runs_import_file").set_value(("runs.zip", archive, "application/zip")).run()
    assert any("2 run(s) (1 finished, 1 failed)" in c.value for c in third.caption)
    serve = third.checkbox(key="runs_import_serve")
    assert serve.label == "Serve these results from the cache for identical runs here" and serve.value is False
    assert "computed elsewhere" in serve.help and "cache hits (marked imported)" in serve.help
    assert "you made or whose source you trust" in serve.help
    assert not [w for w in third.warning if "Results computed elsewhere" in w.value]
    third.button(key="runs_import_confirm").click().run()
    assert not third.exception, third.exception
    assert [s.value for s in third.success if s.value.startswith("Imported")] == [
        "Imported 2 run(s); skipped 0. 0 served from the cache for identical runs here (marked imported); 2 kept "
        "as records only."
    ]
    assert third.get("json")  # the report itself
    table = table_with(third, "status")
    assert set(table["run"]) == {done, failed} and list(table["imported"]) == [True, True]
    assert any("Imported from an archive" in i.value for i in third.info)  # the opened run says so
    runs = Store(tmp_path / "third" / "runs.sqlite3").list_runs()
    assert {r.id for r in runs} == {done, failed} and all(r.imported for r in runs)


def test_an_import_serves_from_the_cache_only_when_ticked_and_says_so(home, tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    done = finished_run(source)
    archive = export_runs(source, all_runs=True)
    at = open_page("runs")
    at.file_uploader(key="runs_import_file").set_value(("runs.zip", archive, "application/zip")).run()
    at.checkbox(key="runs_import_serve").check().run()
    assert any("Results computed elsewhere" in w.value for w in at.warning)
    at.button(key="runs_import_confirm").click().run()
    assert not at.exception, at.exception
    assert [s.value for s in at.success] == [
        "Imported 1 run(s); skipped 0. 1 served from the cache for identical runs here (marked imported); 0 kept "
        "as records only."
    ]

    # Train the same configuration here: the imported run answers, and the banner says it was imported.
    at.switch_page("views/train.py").run()
    at.select_slider(key="train_epochs").set_value(1).run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    store = Store(home / "runs.sqlite3")
    assert [r.id for r in store.list_runs()] == [done]  # nothing new was queued
    [banner] = [s.value for s in at.success if "From the result cache" in s.value]
    assert banner.startswith("**From the result cache, imported**") and f"run `{done}`" in banner
    assert "computed elsewhere" in banner and "Nothing was trained here" in banner
    assert any("Imported from an archive" in i.value for i in at.info)


def broken_archives(valid: bytes) -> dict[str, bytes]:
    def rewrite(member: str, change) -> bytes:
        source, out = zipfile.ZipFile(io.BytesIO(valid)), io.BytesIO()
        with zipfile.ZipFile(out, "w") as target:
            for info in source.infolist():
                data = source.read(info)
                target.writestr(info, change(data) if info.filename == member else data)
        return out.getvalue()

    def bad_status(data: bytes) -> bytes:
        runs = json.loads(data)
        runs[0]["status"] = "exploded"
        return json.dumps(runs).encode()

    return {
        "not a zip": b"this is not a zip file",
        "truncated": valid[: len(valid) // 2],
        "bad status": rewrite("runs.json", bad_status),
        "empty": b"",
    }


def test_a_malformed_archive_is_explained_and_changes_nothing(home, store, tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    finished_run(source, seed=3)
    valid = export_runs(source, all_runs=True)
    here = failed_run(store, "boom")
    before = [(r.id, r.status) for r in store.list_runs()]
    at = open_page("runs")
    for case, data in broken_archives(valid).items():
        at.file_uploader(key="runs_import_file").set_value((f"{case}.zip", data, "application/zip")).run()
        assert not at.exception, (case, at.exception)
        shown = [e for e in errors(at) if "cannot be imported" in e]
        assert len(shown) == 1 and "The store is unchanged" in shown[0], (case, errors(at))
        assert not any(b.key == "runs_import_confirm" for b in at.button), case
    assert [(r.id, r.status) for r in store.list_runs()] == before == [(here, RunStatus.FAILED)]


WIDGET_KINDS = (
    "selectbox",
    "multiselect",
    "checkbox",
    "number_input",
    "text_input",
    "text_area",
    "button",
    "file_uploader",
    "download_button",
)


def own_widgets(at: AppTest) -> list:
    return [
        w
        for kind in WIDGET_KINDS
        for w in getattr(at, kind)
        if (w.key or "").startswith(("data_", "runs_", "open_run"))
    ]


def test_every_widget_of_both_pages_explains_itself_in_a_tooltip(home, store):
    at = upload(open_page("data"), "people.csv", synthetic_csv(seed=4))
    done = finished_run(store)
    queued_run(store, seed=8)
    queued_run(store, seed=9)
    runs = open_page("runs")
    runs.multiselect(key="runs_export_ids").set_value([done]).run()
    runs.button(key="runs_export_prepare").click().run()
    widgets = own_widgets(at) + own_widgets(runs)
    kinds = {w.type for w in widgets}
    assert {
        "selectbox",
        "number_input",
        "text_area",
        "text_input",
        "button",
        "file_uploader",
        "multiselect",
        "checkbox",
        "download_button",
    } <= kinds, kinds
    for widget in widgets:
        assert widget.help and len(widget.help) > 20, f"{widget.key!r} has no tooltip"

"""The Data page (datasets, CSV upload with a declared schema, a saved upload offered on the Train page) under
Streamlit's AppTest."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import services
from app.common import report
from app.common.safe_text import unescape
from app.services import uploads as data_upload
from cache import RunStatus
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from engine.training.datasets import DATASETS
from tests.apptest_helpers import MAIN, errors, metrics, open_page, table_with, upload
from tests.helpers import fast_spec, synthetic_csv, synthetic_schema


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
    # Bounds are never suggested: both numeric columns wait for a declaration. Before the user presses Save that is
    # what is left to do, not an error; pressing it names each column in words (no schema key) and saves nothing.
    assert errors(at) == []
    [left] = [unescape(c.value) for c in at.caption if "Before saving" in unescape(c.value)]
    assert "Column “age” is numeric: declare its lower and upper bounds" in left and "Column “income”" in left
    at.button(key="data_save").click().run()
    assert errors(at) == [
        "Column “age” is numeric: declare its lower and upper bounds (from public knowledge, never the data).",
        "Column “income” is numeric: declare its lower and upper bounds (from public knowledge, never the data).",
    ]
    assert not any("schema" in e for e in errors(at)) and saved_files(home) == []

    declare_bounds(at, age=(17, 100), income=(0, 250_000))
    assert errors(at) == []
    at.number_input(key="data_test_fraction").set_value(0.25)
    at.text_input(key="data_label").set_value("People (synthetic)").run()
    at.button(key="data_save").click().run()
    assert not at.exception and errors(at) == [], (at.exception, errors(at))
    [saved] = [unescape(s.value) for s in at.success]
    assert saved.startswith("Saved **People (synthetic)**: choose it as the dataset on the Train page")
    page_text = " ".join(
        str(e.value) for kind in ("success", "code", "markdown", "caption", "info") for e in at.get(kind)
    )
    sha = hashlib.sha256(data).hexdigest()
    assert str(home) not in page_text and "uploads/" not in page_text and sha[:8] not in page_text

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
    row = table_with(at, "available").set_index("title").loc[label]  # by its label: its path says nothing
    assert (row["train"], row["test"], row["features"], row["classes"]) == (150, 50, 5, 2)
    assert row["available"] == "your upload" and row["dataset"] == "your upload"

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
    schema = synthetic_schema()
    saved = data_upload.save_upload(
        home, file_name="people.csv", data=synthetic_csv(), raw_schema=schema, label="People (synthetic)"
    )
    at = open_page("train")
    options = at.selectbox(key="train_dataset").options
    assert "People (synthetic) (your upload)" in options
    at.selectbox(key="train_dataset").set_value(saved.dataset).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="train_model").options == ["Logistic regression", "MLP (one ReLU hidden layer)"]
    at.number_input(key="train_delta").set_value(1e-4).run()  # δ below 1/N = 1/150
    at.number_input(key="train_lot_size").set_value(32).run()
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


def test_schema_errors_name_the_column_and_what_it_allows_in_words(home):
    at = upload(open_page("data"), "people.csv", synthetic_csv(seed=2))
    declare_bounds(at, age=(100, 17), income=(0, 250_000))
    assert errors(at) == []  # not before the user asks to save
    at.button(key="data_save").click().run()
    assert errors(at) == ["Column “age”: the lower bound must be finite and below the upper bound; got 100 and 17."]
    declare_bounds(at, age=(17, 100))
    at.text_area(key="data_classes").set_value("no\nno").run()
    assert errors(at) == ["The classes of the target column “label” list “no” twice: each class once."]
    at.text_area(key="data_classes").set_value("no\nyes").run()
    at.text_area(key="data_categories::city").set_value("").run()
    assert errors(at) == ["Column “city” is categorical: list at least one category (or ignore the column)."]
    assert saved_files(home) == []
    at.selectbox(key="data_target").set_value("notes").run()  # every value is distinct: not a label
    [error] = errors(at)
    assert error.startswith("**Target column “notes”**: people.csv: the target column 'notes' has more than 20")
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


def test_sizes_read_in_units_and_a_saved_upload_can_be_deleted(home, store):
    schema = {
        "target": "label",
        "classes": ["no", "yes"],
        "numeric": {"age": [17, 100], "income": [0, 250_000]},
        "categorical": {"city": ["Lyon", "Oslo", "Quito"]},
    }
    data = synthetic_csv()
    saved = data_upload.save_upload(home, file_name="people.csv", data=data, raw_schema=schema, label="People")
    at = open_page("data")
    assert metrics(at)["Your uploads"].endswith(" KB")  # a few KB, not "0.0 MB"
    assert "None" not in set(table_with(at, "available")["on disk"])
    assert at.checkbox(key="data_delete_confirm").value is False
    assert at.button(key="data_delete").disabled  # nothing is deleted without the confirmation
    at.checkbox(key="data_delete_confirm").check().run()
    at.button(key="data_delete").click().run()
    assert not at.exception, at.exception
    assert not saved.path.exists() and not saved.sidecar.exists()
    assert data_upload.list_uploads(home) == []
    train = open_page("train")
    assert saved.dataset not in train.selectbox(key="train_dataset").options


def test_a_link_and_a_report_name_an_upload_by_its_label_never_by_its_path_or_hash(home, store):
    data = synthetic_csv()
    saved = data_upload.save_upload(
        home, file_name="people.csv", data=data, raw_schema=synthetic_schema(), label="People (synthetic)"
    )
    sha = hashlib.sha256(data).hexdigest()
    at = open_page("train")
    at.selectbox(key="train_dataset").set_value(saved.dataset).run()
    assert not at.exception, at.exception
    link = at.query_params["config"]
    link = link[0] if isinstance(link, list) else link
    assert str(home) not in link and "uploads" not in link and sha[:8] not in link and "csv:" not in link
    assert json.loads(link)["dataset"] == "upload:People (synthetic)"
    reopened = AppTest.from_file(MAIN, default_timeout=120)  # a new session from the shared link: the same upload
    reopened.query_params["config"] = link
    reopened.run()
    assert not reopened.exception, reopened.exception
    assert reopened.selectbox(key="train_dataset").value == saved.dataset

    # A run's report names the upload by its label; its configuration holds neither the path nor the hash.
    spec = parse_spec(fast_spec(dataset=saved.dataset, schema=saved.schema, epochs=2, lot_size=32, delta=1e-3))
    run = store.get_run(submit(store, spec).run_id)
    assert run.spec["data_sha256"] == sha  # the engine keeps it, to check the file before training
    text = report.run_report(run, pd.DataFrame({"step": []}), pd.DataFrame()).decode()
    assert "People (synthetic)" in text and str(home) not in text and sha[:8] not in text and "uploads/" not in text
    # an upload deleted since: named as such, with no part of its hash
    assert services.dataset_name(f"csv:/elsewhere/{sha}.csv") == "an uploaded CSV no longer saved"


def test_the_datasets_table_names_no_server_folder(home, tmp_path, monkeypatch):
    folder = tmp_path / "private-server-folder"
    files = DATASETS["mnist"].files
    for remote in files:
        (folder / remote.relpath).parent.mkdir(parents=True, exist_ok=True)
        (folder / remote.relpath).write_bytes(b"x")
    monkeypatch.setenv("DPLAB_DATA_DIR", str(folder))
    at = open_page("data")
    table = table_with(at, "available")
    mnist = table[table["dataset"] == "mnist"]["available"].iloc[0]
    assert mnist == "on this machine (a data directory)"
    assert not any("private-server-folder" in str(cell) for cell in table.to_numpy().ravel())

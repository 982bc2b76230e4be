"""The Runs page (counts, filter, queue, history, cancel, export and import) under Streamlit's AppTest, and the
tooltips of the Data and the Runs page's widgets."""

import io
import json
import zipfile

from streamlit.testing.v1 import AppTest

from cache import RunStatus, Store
from engine.jobs.submission import submit
from engine.jobs.transfer import export_runs, import_runs
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.apptest_helpers import errors, metrics, open_page, table_with, upload
from tests.helpers import fast_spec, synthetic_csv


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
    assert set(table_with(at, "status")["id"]) == {done, failed, queued}
    assert any(queued in m.value and "#1 in the queue" in m.value for m in at.markdown)

    at.multiselect(key="runs_filter").set_value(["failed"]).run()
    table = table_with(at, "status")
    assert list(table["id"]) == [failed] and list(table["status"]) == ["failed"]
    assert at.selectbox(key="open_run").value == failed
    assert any("training diverged: loss is NaN at step 12" in e for e in errors(at))
    history = table_with(at, "detail")
    assert list(history["status"]) == ["queued", "running", "failed"]
    assert history["detail"].iloc[-1] == "training diverged: loss is NaN at step 12"

    at.multiselect(key="runs_filter").set_value(["finished", "queued"]).run()
    assert set(table_with(at, "status")["id"]) == {done, queued}


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
    assert set(table["id"]) == {done, failed} and list(table["imported"]) == [True, True]
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
    at.number_input(key="train_epochs").set_value(1).run()
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

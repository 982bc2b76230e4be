"""Values read from private data, on the pages: the Runs page exports released values only unless the
user ticks the private diagnostics, and is warned before the archive is prepared; the Data page marks the classes
and categories it suggests as read from the private file and withholds those fewer than 10 rows have."""

import json

import pytest

from app.data import form
from cache import Store
from engine.jobs.transfer import export_runs
from engine.metric_names import PRIVATE_DIAGNOSTICS
from engine.training.datasets import RARE_LEVEL_ROWS
from tests.app.data.test_data_page import declare_bounds
from tests.app.runs.test_runs_page import finished_run
from tests.apptest_helpers import errors, open_page, upload
from tests.engine.jobs.test_export_privacy import diagnosed_run
from tests.helpers import synthetic_csv, unzip


def metric_names(data: bytes) -> set[str]:
    return {
        line.split(",")[1]
        for name, text in unzip(data).items()
        if name.startswith("metrics/")
        for line in text.decode().splitlines()[1:]
    }


def warnings_of(at) -> list[str]:
    return [w.value for w in at.warning]


# ---------------------------------------------------------------------------------------- the Runs page


@pytest.mark.slow
def test_the_runs_page_exports_released_values_unless_private_diagnostics_are_ticked_after_a_warning(home, store):
    done = finished_run(store)
    at = open_page("runs")
    at.multiselect(key="runs_export_ids").set_value([done]).run()
    private = at.checkbox(key="runs_export_private")
    assert private.value is False and private.label == "Include private diagnostics (not covered by ε)"
    assert not [w for w in warnings_of(at) if "not covered by ε" in w]
    assert any("released values only" in c.value for c in at.caption)
    at.button(key="runs_export_prepare").click().run()
    assert not at.exception and errors(at) == []
    default = at.session_state["runs_export"][1]
    assert "released values only" in at.download_button(key="runs_export_download").label
    assert json.loads(unzip(default.data)["manifest.json"])["private_diagnostics"] is False
    assert metric_names(default.data) and not metric_names(default.data) & PRIVATE_DIAGNOSTICS

    # Ticking it shows the warning at once, before any archive with them is prepared or offered.
    at.checkbox(key="runs_export_private").check().run()
    [warning] = [w for w in warnings_of(at) if "Private diagnostics: not covered by ε" in w]
    assert "computed on the private training data and never released" in warning
    assert "do not publish or share it as differentially private" in warning and "manifest records" in warning
    assert not [
        b for b in at.get("download_button") if b.key == "runs_export_download"
    ]  # the archive prepared before was without them: not offered for this
    at.button(key="runs_export_prepare").click().run()
    opted = at.session_state["runs_export"][1]
    assert (
        opted.private_diagnostics and "with private diagnostics" in at.download_button(key="runs_export_download").label
    )
    assert json.loads(unzip(opted.data)["manifest.json"])["private_diagnostics"] is True
    assert {"train_loss", "clip_fraction", "grad_norm_p50", "lot_size"} <= metric_names(opted.data)


def test_the_import_preview_warns_about_an_archive_with_private_diagnostics(home, tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    diagnosed_run(source)
    at = open_page("runs")
    at.file_uploader(key="runs_import_file").set_value(("runs.zip", export_runs(source, all_runs=True), "x")).run()
    assert not [w for w in warnings_of(at) if "holds private diagnostics" in w]
    opted = export_runs(source, all_runs=True, include_private_diagnostics=True)
    at.file_uploader(key="runs_import_file").set_value(("runs.zip", opted, "application/zip")).run()
    assert [w for w in warnings_of(at) if "This archive holds private diagnostics" in w]


# ---------------------------------------------------------------------------------------- the Data page


def with_rare_values(data: bytes) -> bytes:
    """The synthetic CSV with one row (past the 20 previewed) in a city and one in a class no other row has."""
    lines = data.decode().splitlines()
    lines[30] = lines[30].replace(lines[30].split(",")[2], "Vaduz")
    lines[40] = lines[40].rsplit(",", 1)[0] + ",perhaps"
    return ("\n".join(lines) + "\n").encode()


def test_suggested_levels_are_marked_private_and_rare_ones_withheld(home):
    assert RARE_LEVEL_ROWS == 10
    at = upload(open_page("data"), "people.csv", with_rare_values(synthetic_csv(seed=5)))
    [warning] = [w for w in warnings_of(at) if "Read from your private file" in w]
    assert "travels into every run spec, every export and the model's one-hot layout" in warning
    assert "fewer than 10 rows is not suggested (2 withheld from this file)" in warning
    assert warning == form.LEVELS_WARNING.format(k=10, withheld=2)
    assert at.text_area(key="data_classes").value == "no\nyes"
    assert "at least 10 rows" in at.text_area(key="data_classes").help
    assert any("1 class value(s) seen in fewer than 10 rows withheld" in c.value for c in at.caption)
    assert at.text_area(key="data_categories::city").value == "Lyon\nOslo\nQuito"
    assert any(
        "3 one-hot feature(s); 1 rare level(s) withheld (fewer than 10 rows each)" in c.value for c in at.caption
    )
    shown = [w.value for kind in ("text_area", "caption", "markdown", "warning", "error") for w in at.get(kind)]
    assert not [text for text in shown if "Vaduz" in str(text) or "perhaps" in str(text)]

    # The user may declare a rare value (public knowledge) explicitly: then it is saved, as typed.
    at.text_area(key="data_categories::city").set_value("Lyon\nOslo\nQuito\nVaduz")
    at.text_area(key="data_classes").set_value("no\nperhaps\nyes")
    declare_bounds(at, age=(17, 100), income=(0, 250_000))
    at.button(key="data_save").click().run()
    assert not at.exception and errors(at) == [], errors(at)
    saved = at.session_state["data_saved"]["schema"]
    assert saved["categorical"]["city"] == ["Lyon", "Oslo", "Quito", "Vaduz"]
    assert saved["classes"] == ["no", "perhaps", "yes"]

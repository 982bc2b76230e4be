"""The reproduced table (`bench.table`): each row's record, the mean ± sd over seeds, the charged search's ε
against the engine's private-search ε, rows left to a GPU, and one record file per row."""

import json
import math
import statistics
from dataclasses import replace

import pytest

from bench import __main__ as bench_main
from bench import table
from bench.search import SearchRow, grid_spec, search_cost
from bench.table_rows import ADULT_ROW, ROWS, TableRow
from engine.jobs.sweep import privacy_of_sweep
from engine.privacy import panel
from engine.training import dataset_info, parse_spec, plan_run

DIGITS = {"dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "delta": 1e-5, "clip_norm": 1.0}
DIGITS |= {"lot_size": 64, "epochs": 1}
PAPER = {"paper_accuracy": 0.9, "paper_source": "a paper", "source": "the test"}
SEARCHED = TableRow(
    name="digits_searched",
    title="digits, lr searched",
    spec=DIGITS,
    epsilon=2.0,
    target_accuracy=0.5,
    grid={"lr": [1.0, 2.0]},
    mean_trials=2.0,
    seeds=(0, 1),
    **PAPER,
)
FIXED = TableRow(
    name="digits_fixed",
    title="digits, the paper's setting",
    spec={**DIGITS, "lr": 2.0, "noise_multiplier": 1.0},
    epsilon=2.0,
    target_accuracy=0.99,
    seeds=(0, 1, 2),
    **PAPER,
)
SLOW = replace(FIXED, name="digits_slow", slow=True, spec={**FIXED.spec, "noise_multiplier": 2.0, "epochs": 50})
TYPES = {
    "name": str,
    "value": float,
    "unit": str,
    "row": str,
    "dataset": str,
    "model": str,
    "features": str,
    "epsilon": float,
    "delta": float,
    "accountant": str,
    "accuracy_mean": float,
    "accuracies": list,
    "seeds": list,
    "charged": dict,
    "target_accuracy": float,
    "paper_accuracy": float,
    "paper_source": str,
    "hardware": dict,
    "seconds": float,
    "command": str,
    "target_met": bool,
}


@pytest.fixture(scope="module")
def trained() -> dict[str, dict]:
    records = table.run(rows=[SEARCHED, FIXED])
    return {r["row"]: r for r in records}


def test_mean_and_sample_sd():
    assert table.mean_and_sd([0.8, 0.9, 1.0]) == (pytest.approx(0.9), pytest.approx(0.1))
    assert table.mean_and_sd([0.5]) == (0.5, None)


def test_a_trained_record_has_every_field_and_its_mean_and_sd_over_seeds(trained):
    for record in trained.values():
        for key, kind in TYPES.items():
            assert isinstance(record[key], kind), (record["row"], key)
        accuracies = record["accuracies"]
        assert len(accuracies) == len(record["seeds"]) == len(record["per_seed"])
        assert record["value"] == record["accuracy_mean"] == pytest.approx(statistics.fmean(accuracies))
        assert record["accuracy_sd"] == pytest.approx(statistics.stdev(accuracies))
        assert record["name"] == f"table/{record['row']}/test_accuracy" and record["trained"] is True
        assert {"device", "cpu", "threads"} <= set(record["hardware"])
        assert "--suite table" in record["command"]


def test_a_searched_row_reports_the_engines_private_search_epsilon(trained):
    record = trained["digits_searched"]
    charged = record["charged"]
    search = SearchRow(name="x", base=DIGITS, grid=SEARCHED.grid, target_epsilon=2.0, mean=2.0, uncharged=None)
    expected = privacy_of_sweep(grid_spec(search, charged["noise_multiplier"])).search
    assert charged["charged"] is True and charged["search_included"] is True
    assert record["epsilon"] == expected.epsilon == charged["search_epsilon"] <= SEARCHED.epsilon
    assert record["delta"] == expected.delta
    assert "Papernot & Steinke 2022" in charged["accountant"]
    for search_run in record["per_seed"]:  # each seed is a whole search; its best trial is what it releases
        best = max(t["test_accuracy"] for t in search_run["trials"])
        assert search_run["test_accuracy"] == best and len(search_run["trials"]) >= 1
        assert all(t["epsilon"] < record["epsilon"] for t in search_run["trials"])


def test_the_calibrations_search_cost_is_the_engines_private_search_epsilon():
    search = SearchRow(name="x", base=DIGITS, grid={"lr": [1.0, 2.0]}, target_epsilon=2.0, mean=3.0, uncharged=None)
    for sigma in (0.8, 2.5):
        assert search_cost(search, sigma) == privacy_of_sweep(grid_spec(search, sigma)).search.epsilon


def test_a_fixed_row_is_not_charged_and_reports_its_runs_epsilon(trained):
    record = trained["digits_fixed"]
    assert record["charged"]["charged"] == table.NOT_NEEDED and record["charged"]["search_included"] is False
    assert record["epsilon"] == max(s["epsilon"] for s in record["per_seed"]) <= FIXED.epsilon
    assert [s["seed"] for s in record["per_seed"]] == [0, 1, 2]
    assert len(set(record["accuracies"])) > 1  # the seeds trained different runs
    assert record["target_met"] is False  # 0.99 on digits at ε 2 in one epoch is out of reach


def test_a_slow_row_records_its_filled_budget_and_awaits_a_gpu(home, monkeypatch):
    monkeypatch.setattr(table, "SLOW", False)
    (record,) = table.run(rows=[SLOW])
    assert record["trained"] is False and record["reason"] == table.AWAITS_GPU
    assert record["name"] == "table/digits_slow/epsilon" and record["value"] == record["epsilon"] > 0
    plan = plan_run(parse_spec({**SLOW.spec, "seed": 0}), n_train=dataset_info("digits").n_train)
    assert record["settings"] == {"noise_multiplier": 2.0, "epochs": pytest.approx(50, rel=0.01), "steps": plan.steps}
    assert record["epsilon"] == panel(plan.ledger(), delta=1e-5).tightest()[1]
    assert record["charged"]["charged"] == table.NOT_NEEDED and "DPLAB_BENCH_SLOW=1" in record["command"]


def test_a_spec_the_engine_refuses_gets_a_record_naming_the_key(home):
    refused = replace(FIXED, name="digits_refused", spec={**FIXED.spec, "no_such_key": 1})
    (record,) = table.run(rows=[refused])
    assert record["trained"] is False and math.isnan(record["value"])
    assert "no_such_key" in record["reason"]


def test_the_gpu_variant_takes_its_rows_in_order_and_stops_at_its_time_cap(home):
    rows = [replace(FIXED, gpu_order=2), replace(SLOW, gpu_order=1), replace(FIXED, name="digits_cpu", gpu_order=None)]
    assert [r.name for r in table.select(rows, quick=False, gpu=True)] == ["digits_slow", "digits_fixed"]
    records = table.run(rows=rows, gpu=True, time_cap_s=-1.0)
    assert [r["row"] for r in records] == ["digits_slow", "digits_fixed"]
    assert all(r["trained"] is False and "time cap" in r["reason"] for r in records)
    assert all("gpu_check" in r["command"] for r in records)


def test_the_rows_train_three_seeds_and_charge_every_search():
    assert [r.name for r in table.select(ROWS, quick=True, gpu=False)] == [ADULT_ROW.name]
    for row in ROWS:
        assert len(row.seeds) >= 3
        assert row.searched == (row.mean_trials is not None)
        assert row.epsilon <= 8 and row.spec.get("delta") in (1e-5, 1e-6)
        assert "seed" not in row.spec


def test_quick_adult_row_end_to_end_writes_one_record_per_row(home, shared_datasets, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DPLAB_DATA_DIR", str(shared_datasets))
    tiny = replace(ADULT_ROW, spec={**ADULT_ROW.spec, "epochs": 1}, grid={"model": ["logreg"], "lr": [1.0]})
    monkeypatch.setattr(table, "ROWS", [replace(tiny, seeds=(0, 1)), replace(SLOW, quick=True)])
    monkeypatch.setattr(table, "SLOW", False)
    out = tmp_path / "records"
    argv = ["--suite", "table", "--quick", "--records", str(out), "--json", str(tmp_path / "a.json")]
    assert bench_main.main(argv) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["adult_logreg_or_mlp_eps1.json", "digits_slow.json"]
    adult = json.loads((out / "adult_logreg_or_mlp_eps1.json").read_text())
    assert adult["trained"] is True and len(adult["accuracies"]) == 2 and adult["accuracy_mean"] > 0.7
    assert adult["epsilon"] <= 1.0 and adult["charged"]["distribution"]["mean"] == ADULT_ROW.quick_mean_trials
    assert "--quick" in adult["command"] and adult["dataset"] == "adult"
    assert json.loads((tmp_path / "a.json").read_text())[0] == adult
    assert "| UCI Adult" in capsys.readouterr().err

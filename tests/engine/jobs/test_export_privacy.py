"""Exports carry released values only: the diagnostics computed on private training data (lot loss,
accuracy and size, clip fraction, gradient-norm quantiles, regret, step timings), which no ε covers, travel only
on an explicit opt-in that the archive's manifest records; archives written before the opt-in still import."""

import dataclasses
import json
import re

import pytest

from cache import RunStatus, Store
from cache.archive.reader import read_archive
from engine import ENGINE_VERSION
from engine.jobs.disclosure import (
    DAY_S,
    WITHHELD_ERROR,
    day_of,
    is_private_field,
    public_result,
)
from engine.jobs.transfer import import_runs, prepare_export, summarize_archive
from engine.metric_names import PRIVATE_DIAGNOSTICS, RELEASED_METRICS, is_released_metric
from engine.training import StepRecord, TrainResult, parse_spec
from tests.cache.store.test_maintenance import cli_json, result_for, run_cli
from tests.helpers import edit_json, fast_spec, unzip

STEPS = 4
ACCOUNTANT_CURVES = ("epsilon_naive", "epsilon_advanced", "epsilon_zcdp", "epsilon_pld")
# Result fields of the kind the issue names (a final training loss, gradient-norm summaries), nested too.
PRIVATE_RESULT_FIELDS = {"final_train_loss": 0.21, "grad_norm_summary": {"p50": 1.3}, "lot_size": 61}


def every_metric(step: int) -> dict[str, float]:
    """A step's metrics under every name a run records: each StepRecord field, and the accountants' curves."""
    values = {f.name: 0.5 + step for f in dataclasses.fields(StepRecord) if f.name != "step"}
    return StepRecord(step=step, **values).metrics() | {name: 0.1 * step for name in ACCOUNTANT_CURVES}


def diagnosed_run(store: Store, status: RunStatus = RunStatus.FINISHED, seed: int = 0) -> str:
    """A run with every metric name at every step, and a result holding private fields beside the released ones."""
    spec = parse_spec(fast_spec(seed=seed))
    run_id = store.create_run(
        spec=spec.to_dict(),
        cache_key=spec.cache_key(ENGINE_VERSION),
        engine_version=ENGINE_VERSION,
        status=RunStatus.RUNNING,
        worker="w",
    )
    store.set_plan(run_id, plan={"steps": STEPS, "noise_multiplier": 1.1, "delta": 1e-5}, total_steps=STEPS)
    store.append_metrics(run_id, [(t, every_metric(t)) for t in range(STEPS + 1)])
    result = result_for(STEPS, stopped_early=status is RunStatus.CANCELLED) | PRIVATE_RESULT_FIELDS
    result["stack"] = {
        "members": 2,
        "lead_seed": 0,
        "joint_delta": 1e-5,
        "joint_epsilon": 3.0,
        "joint_accountant": "rdp",
        "position": 0,
        "train_accuracy": 0.97,
    }
    store.finish(run_id, status=status, result=result)
    return run_id


def private_names_in(text: str) -> list[str]:
    """The private diagnostics' names (and the private result fields') that `text` mentions."""
    words = [*PRIVATE_DIAGNOSTICS, *PRIVATE_RESULT_FIELDS]  # whole words: regret_bound is not regret
    found = {n for n in words if re.search(rf"\b{n}\b", text)}
    return sorted(found | {stem for stem in ("grad_norm", "train_loss", "clip_fraction") if stem in text})


def result_keys(node) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in result_keys(v)}
    return set()


def test_every_metric_a_run_records_is_classified_released_or_private():
    """A new StepRecord field fails here until it is declared released or private (unknown names are exported as
    private: only on the opt-in)."""
    recorded = {f.name for f in dataclasses.fields(StepRecord)} - {"step"}
    assert not RELEASED_METRICS & PRIVATE_DIAGNOSTICS
    assert recorded == RELEASED_METRICS | PRIVATE_DIAGNOSTICS, recorded ^ (RELEASED_METRICS | PRIVATE_DIAGNOSTICS)
    assert {n for n in recorded if is_released_metric(n)} == {
        "epoch",
        "epsilon",
        "test_accuracy",
        "test_loss",
        "regret_bound",
    }
    assert all(is_released_metric(n) for n in ACCOUNTANT_CURVES)
    assert not is_released_metric("epsilon_") and not is_released_metric("some_new_metric")


def test_every_result_field_of_the_trainer_but_its_duration_is_released_and_private_ones_are_dropped_at_any_depth():
    """Every TrainResult field but `seconds` (the run's wall time, which follows the realized lot sizes) is released;
    a new one named like a diagnostic, a duration or a rate would be dropped from exports."""
    assert [f.name for f in dataclasses.fields(TrainResult) if is_private_field(f.name)] == ["seconds"]
    assert all(is_private_field(n) for n in ("warmup_seconds", "steps_per_second", "elapsed_s", "elapsed_total"))
    result = result_for(3) | PRIVATE_RESULT_FIELDS | {"stack": {"members": 2, "clip_fraction": 0.4}}
    cleaned = public_result(result)
    assert cleaned == {k: v for k, v in result_for(3).items() if k != "seconds"} | {"stack": {"members": 2}}
    assert public_result(None) is None and result["lot_size"] == 61  # the input is left as it was


def test_a_default_export_holds_no_private_diagnostic_anywhere(tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    ids = [diagnosed_run(source), diagnosed_run(source, RunStatus.CANCELLED, seed=1)]
    export = prepare_export(source, ids)
    assert export.private_diagnostics is False and export.to_dict()["private_diagnostics"] is False
    members = unzip(export.data)
    manifest = json.loads(members["manifest.json"])
    assert manifest["private_diagnostics"] is False and "left out" in manifest["privacy_note"]
    assert private_names_in(members["manifest.json"].decode()) == []
    for run in json.loads(members["runs.json"]):
        assert private_names_in(json.dumps(run["result"])) == [], run["id"]
        assert not result_keys(run["result"]) & {*PRIVATE_DIAGNOSTICS, *PRIVATE_RESULT_FIELDS}
        assert run["result"]["test_accuracy"] == 0.91 and run["result"]["stack"]["joint_epsilon"] == 3.0
    for run_id in ids:
        text = members[f"metrics/{run_id}.csv"].decode()
        assert private_names_in(text) == [], run_id
        names = {line.split(",")[1] for line in text.splitlines()[1:]}
        assert names == {"epoch", "epsilon", "test_accuracy", "test_loss", "regret_bound", *ACCOUNTANT_CURVES}

    store = Store(tmp_path / "target.sqlite3")
    report = import_runs(store, export.data)
    assert set(report.imported) == set(ids) and report.metric_rows == len(ids) * (STEPS + 1) * 9
    assert report.to_dict()["archive"]["private_diagnostics"] is False
    assert not {name for run_id in ids for _, name, _ in store.metrics(run_id)} & PRIVATE_DIAGNOSTICS
    assert summarize_archive(export.data).private_diagnostics is False


def test_private_diagnostics_travel_only_on_the_opt_in_which_the_manifest_records(tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    run_id = diagnosed_run(source)
    export = prepare_export(source, [run_id], include_private_diagnostics=True)
    members = unzip(export.data)
    manifest = json.loads(members["manifest.json"])
    assert manifest["private_diagnostics"] is True and "do not publish" in manifest["privacy_note"]
    [run] = json.loads(members["runs.json"])
    assert run["result"] == source.get_run(run_id).result  # private fields included, as asked
    store = Store(tmp_path / "target.sqlite3")
    assert import_runs(store, export.data).archive_private_diagnostics is True
    assert store.metrics(run_id) == source.metrics(run_id)  # every row, private ones included
    assert {name for _, name, _ in store.metrics(run_id)} >= PRIVATE_DIAGNOSTICS
    assert read_archive(export.data).private_diagnostics and summarize_archive(export.data).private_diagnostics

    without_metrics = prepare_export(source, [run_id], include_metrics=False)  # --no-metrics keeps working
    assert not [n for n in unzip(without_metrics.data) if n.startswith("metrics/")]
    [run] = json.loads(unzip(without_metrics.data)["runs.json"])
    assert private_names_in(json.dumps(run["result"])) == [] and run["result"]["epsilon"] == 2.5
    assert read_archive(without_metrics.data).includes_metrics is False


@pytest.mark.parametrize("includes_metrics", [True, False])
def test_an_archive_from_before_the_opt_in_still_imports(tmp_path, includes_metrics):
    """Its manifest has no private_diagnostics: read as holding them whenever it holds metrics (every export did),
    and whenever its runs carry exact timings (every export did)."""
    source = Store(tmp_path / "source.sqlite3")
    run_id = diagnosed_run(source)
    new = prepare_export(source, [run_id], include_metrics=includes_metrics, include_private_diagnostics=True).data

    def old_manifest(manifest: dict) -> None:
        del manifest["private_diagnostics"], manifest["privacy_note"]

    old = edit_json("manifest.json", old_manifest)(new)
    assert "private_diagnostics" not in json.loads(unzip(old)["manifest.json"])
    assert read_archive(old).private_diagnostics is includes_metrics  # the manifest's word
    # ...but its runs carry their exact timings (`seconds`, times to the second), as every export did then
    assert summarize_archive(old).private_diagnostics is True
    store = Store(tmp_path / "target.sqlite3")
    assert import_runs(store, old).imported == (run_id,)
    assert store.metrics(run_id) == (source.metrics(run_id) if includes_metrics else [])


def test_the_export_command_leaves_diagnostics_out_unless_asked(store, capsys, tmp_path):
    run_id = diagnosed_run(store)  # the CLI's store: DPLAB_HOME
    plain, opted = tmp_path / "plain.zip", tmp_path / "opted.zip"
    code, out = cli_json(capsys, "export", run_id, "-o", str(plain))
    assert code == 0 and out["private_diagnostics"] is False and out["include_metrics"] is True
    assert private_names_in(unzip(plain.read_bytes())[f"metrics/{run_id}.csv"].decode()) == []
    code, text, _ = run_cli(capsys, "export", run_id, "-o", str(opted), "--include-private-diagnostics")
    assert code == 0 and "WARNING: Holds private diagnostics computed on the training data" in text
    assert json.loads(unzip(opted.read_bytes())["manifest.json"])["private_diagnostics"] is True
    assert set(private_names_in(unzip(opted.read_bytes())[f"metrics/{run_id}.csv"].decode())) >= PRIVATE_DIAGNOSTICS
    code, text, _ = run_cli(capsys, "export", run_id, "-o", str(plain), "--force")
    assert code == 0 and "Diagnostics computed on the private training data (which no epsilon covers) were left" in text
    code, out = cli_json(capsys, "export", run_id, "-o", str(plain), "--no-metrics", "--force")
    assert code == 0 and out["include_metrics"] is False and out["private_diagnostics"] is False
    assert not [n for n in unzip(plain.read_bytes()) if n.startswith("metrics/")]


def test_a_failed_upload_runs_error_quoting_a_cell_is_withheld_unless_asked(tmp_path):
    """A CSV run that failed on a cell quotes the cell; the error and the status history's detail stay home by
    default, and travel only with the private-diagnostics opt-in. A built-in dataset's error travels as is."""
    source = Store(tmp_path / "source.sqlite3")
    quoted = "line 7, column 'country': value 'Tuvalu' is not one of the declared categories"
    ids = []
    for dataset in ("csv:/data/people.csv", "digits"):
        spec = fast_spec() | {"dataset": dataset}
        run_id = source.create_run(
            spec=spec, cache_key=f"key-{dataset}", engine_version=ENGINE_VERSION, status=RunStatus.RUNNING, worker="w"
        )
        source.finish(run_id, status=RunStatus.FAILED, error=quoted)
        ids.append(run_id)
    upload_run, builtin_run = ids

    def exported(include: bool) -> dict[str, dict]:
        data = prepare_export(source, ids, include_private_diagnostics=include).data
        return {run["id"]: run for run in json.loads(unzip(data)["runs.json"])}

    default = exported(False)
    assert "Tuvalu" not in json.dumps(default[upload_run])
    assert default[upload_run]["error"] == WITHHELD_ERROR
    assert [e["detail"] for e in default[upload_run]["events"] if e["status"] == "failed"] == [WITHHELD_ERROR]
    assert default[builtin_run]["error"] == quoted
    assert exported(True)[upload_run]["error"] == quoted


# ---------------------------------------------------------------------------------------- timings


def timed_runs(store: Store) -> tuple[list[str], str]:
    """A finished and a cancelled run with every diagnostic, and a sweep of both (its own creation time)."""
    ids = [diagnosed_run(store), diagnosed_run(store, RunStatus.CANCELLED, seed=1)]
    sweep_id, _ = store.create_sweep(
        spec={"name": "seeds", "grid": {"seed": [0, 1]}},
        name="seeds",
        members=[({"seed": 0}, ids[0]), ({"seed": 1}, ids[1])],
    )
    return ids, sweep_id


def times_of(run: dict) -> list[float]:
    """A run's timestamps as the archive holds them: created, started, finished, then each status event's."""
    return [run["created_at"], run["started_at"], run["finished_at"], *(e["at"] for e in run["events"])]


def source_times(store: Store, run_id: str) -> list[float]:
    run = store.get_run(run_id)
    return [run.created_at, run.started_at, run.finished_at, *(e.at for e in store.events(run_id))]


def test_a_default_export_holds_no_duration_and_only_day_floored_times(tmp_path):
    """A run's timings follow its realized (private) lot sizes: by default its result has no `seconds` and every
    timestamp of the run, its status history and its sweep is floored to the UTC day, in order; it imports."""
    source = Store(tmp_path / "source.sqlite3")
    ids, sweep_id = timed_runs(source)
    assert any(t % DAY_S for run_id in ids for t in source_times(source, run_id))  # the store's are exact
    export = prepare_export(source, ids, sweep_id=sweep_id)
    members = unzip(export.data)
    assert "UTC day" in json.loads(members["manifest.json"])["privacy_note"]
    runs = {run["id"]: run for run in json.loads(members["runs.json"])}
    for run_id in ids:
        run = runs[run_id]
        assert "seconds" not in result_keys(run["result"]) and source.get_run(run_id).result["seconds"] == 1.5
        times = times_of(run)
        assert times == [day_of(t) for t in source_times(source, run_id)], run_id
        assert all(t % DAY_S == 0 for t in times) and run["events"]
        assert run["created_at"] <= run["started_at"] <= run["finished_at"]
        assert [e["at"] for e in run["events"]] == sorted(e["at"] for e in run["events"])
    [sweep] = json.loads(members["sweeps.json"])
    assert sweep["created_at"] == day_of(source.get_sweep(sweep_id).created_at)

    assert summarize_archive(export.data).private_diagnostics is False
    store = Store(tmp_path / "target.sqlite3")
    report = import_runs(store, export.data)
    assert set(report.imported) == set(ids) and report.archive_private_diagnostics is False
    for run_id in ids:
        assert source_times(store, run_id) == [day_of(t) for t in source_times(source, run_id)]
        assert "seconds" not in store.get_run(run_id).result
    assert import_runs(store, export.data).imported == ()  # and again: nothing changes


def test_with_private_diagnostics_an_export_holds_the_exact_timings(tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    ids, sweep_id = timed_runs(source)
    export = prepare_export(source, ids, sweep_id=sweep_id, include_private_diagnostics=True)
    members = unzip(export.data)
    runs = {run["id"]: run for run in json.loads(members["runs.json"])}
    for run_id in ids:
        assert runs[run_id]["result"]["seconds"] == 1.5
        assert times_of(runs[run_id]) == source_times(source, run_id)
    assert json.loads(members["sweeps.json"])[0]["created_at"] == source.get_sweep(sweep_id).created_at
    assert "exact timestamps" in json.loads(members["manifest.json"])["privacy_note"]
    store = Store(tmp_path / "target.sqlite3")
    assert import_runs(store, export.data).archive_private_diagnostics is True
    for run_id in ids:
        assert source_times(store, run_id) == source_times(source, run_id)
        assert store.get_run(run_id).result["seconds"] == 1.5


@pytest.mark.parametrize("timing", ["seconds", "times"])
def test_an_archive_whose_runs_carry_exact_timings_is_flagged_whatever_its_manifest_says(tmp_path, timing):
    """A default export written before timings were coarsened says `private_diagnostics: false` but carries each
    run's `seconds` and exact times: the preview and the import report say it holds private diagnostics."""
    source = Store(tmp_path / "source.sqlite3")
    run_id = diagnosed_run(source)
    default = prepare_export(source, [run_id]).data
    exact = {
        "seconds": lambda runs: runs[0]["result"].update(seconds=1.5),
        "times": lambda runs: runs[0].update(finished_at=source.get_run(run_id).finished_at),
    }[timing]
    older = edit_json("runs.json", exact)(default)
    assert json.loads(unzip(older)["manifest.json"])["private_diagnostics"] is False
    assert summarize_archive(default).private_diagnostics is False
    assert summarize_archive(older).private_diagnostics is True
    store = Store(tmp_path / "target.sqlite3")
    report = import_runs(store, older)
    assert report.imported == (run_id,) and report.archive_private_diagnostics is True


def test_day_of_floors_to_the_utc_day_and_keeps_order():
    midnight = 1_717_200_000.0  # 2024-06-01T00:00:00Z
    assert midnight % DAY_S == 0
    times = [midnight - 0.5, midnight, midnight + 1e-6, midnight + DAY_S - 1e-3, midnight + DAY_S, 12.0]
    assert [day_of(t) for t in times] == [midnight - DAY_S, midnight, midnight, midnight, midnight + DAY_S, 0.0]
    assert all(day_of(a) <= day_of(b) for a, b in zip(sorted(times), sorted(times)[1:], strict=False))

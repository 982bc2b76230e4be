"""An ε with no finite bound is ∞ wherever it appears: the naive and advanced composition curves return
`math.inf` (never the largest float, 1.8e308, which `np.nan_to_num` puts in its place), JSON writes it
`Infinity`, words write it ∞, and a record made before the fix (holding 1.8e308) is shown and exported as ∞."""

import json
import math

import numpy as np
import pytest

from cache import RunStatus, Store
from engine.jobs.transfer import import_runs, prepare_export
from engine.privacy import PrivacyStatement, gaussian_event, laplace_event, single_phase
from engine.privacy.accountants import ACCOUNTANTS, Panel, composition
from engine.privacy.accountants.curve import (
    UNBOUNDED_EPSILON,
    EpsilonCurve,
    epsilon_text,
    epsilons_as_inf,
    unbounded_as_inf,
)
from engine.privacy.statement import privacy_statement
from tests.cache.store.test_maintenance import cli_json, make_run, run_cli
from tests.helpers import unzip

LARGEST = float(np.finfo(np.float64).max)  # 1.7976931348623157e308: the stand-in an older record may hold


@pytest.fixture
def coarse_profiles(monkeypatch):
    """Single-release privacy profiles on a coarse PLD grid (still valid upper bounds): a Gaussian at σ = 0.05
    takes half a second instead of a minute. The profiles' cache is emptied before and after."""
    monkeypatch.setattr(composition, "PROFILE_DISCRETIZATION", 1e-2)
    composition.delta_profile.cache_clear()
    yield
    composition.delta_profile.cache_clear()


def unbounded_ledger():
    """Ten Gaussian releases at σ = 0.05: one release's ε₀ at δ/10 is beyond every finite grid point (∞)."""
    return single_phase(gaussian_event(noise_multiplier=0.05), 10)


def test_naive_composition_is_infinite_not_the_largest_float(coarse_profiles):
    curve = composition.naive_curve(unbounded_ledger(), delta=1e-5)
    assert np.all(np.isposinf(curve.epsilons)), curve.epsilons
    assert curve.final_epsilon == math.inf and epsilon_text(curve.final_epsilon) == "∞"


@pytest.mark.parametrize("delta", [1e-5, 0.7])
def test_advanced_composition_is_infinite_not_the_largest_float(coarse_profiles, delta):
    """At δ = 0.7, 2 ln(1/δ') < 1: the largest float did not overflow to ∞ and stood in for it."""
    curve = composition.advanced_curve(unbounded_ledger(), delta=delta, steps=np.arange(1, 11))
    assert np.all(np.isposinf(curve.epsilons[1:])) and not np.any(
        np.isfinite(curve.epsilons) & (curve.epsilons > 1e300)
    )


def test_one_unbounded_release_among_bounded_ones_makes_the_sum_infinite(monkeypatch):
    """The mechanism of the bug, without any profile: a release whose ε₀ is ∞ beside a finite one."""
    monkeypatch.setattr(
        composition, "release_epsilons", lambda event, neighboring, deltas: np.full(np.shape(deltas), np.inf)
    )
    ledger = single_phase(laplace_event(scale=1.0), 3)
    assert composition.naive_curve(ledger, delta=1e-5).final_epsilon == math.inf
    assert composition.advanced_curve(ledger, delta=0.7).final_epsilon == math.inf


def test_finite_composition_bounds_are_unchanged():
    """A Laplace ledger: Σ ε₀ over the releases, as before (the fix only touches ∞)."""
    ledger = single_phase(laplace_event(scale=2.0), 4)
    naive = composition.naive_curve(ledger, delta=1e-5).final_epsilon
    per_release = composition.release_epsilons(laplace_event(scale=2.0), ledger.neighboring, np.array([1e-5 / 4]))
    assert naive == pytest.approx(4 * float(per_release[0])) and math.isfinite(naive)
    assert math.isfinite(composition.advanced_curve(ledger, delta=1e-5).final_epsilon)


def test_the_statement_names_an_unbounded_accountant_with_infinity(coarse_profiles):
    ledger = unbounded_ledger()
    naive = composition.naive_curve(ledger, delta=1e-5)
    tight = EpsilonCurve(accountant="pld", delta=1e-5, steps=naive.steps, epsilons=np.array([2269.74]))
    panel = Panel(delta=1e-5, curves={"pld": tight, "naive": naive}, not_applicable={})
    statement = privacy_statement(ledger=ledger, panel=panel, dataset_size=1000)
    assert isinstance(statement, PrivacyStatement)
    assert f"{ACCOUNTANTS['naive'].title} ∞" in statement.text() and "e+308" not in statement.text()


def test_older_records_largest_float_reads_as_infinity():
    assert unbounded_as_inf(LARGEST) == math.inf and unbounded_as_inf(UNBOUNDED_EPSILON) == math.inf
    assert unbounded_as_inf(3.5) == 3.5 and unbounded_as_inf(None) is None and unbounded_as_inf(True) is True
    result = {
        "epsilon": 2.5,
        "epsilons": {"rdp": 2.9, "naive": LARGEST, "advanced": math.inf},
        "stack": {"joint_epsilon": LARGEST, "members": 2},
        "test_loss": 1e301,  # not an ε: left as it is
    }
    shown = epsilons_as_inf(result)
    assert shown["epsilons"] == {"rdp": 2.9, "naive": math.inf, "advanced": math.inf}
    assert shown["stack"] == {"joint_epsilon": math.inf, "members": 2} and shown["test_loss"] == 1e301
    assert result["epsilons"]["naive"] == LARGEST and epsilons_as_inf(None) is None  # the input is left as it was


def legacy_run(store: Store) -> str:
    """A finished run recorded before the fix: its naive ε (result and per-step metric) is the largest float."""
    run_id = make_run(store)
    with store.transaction(immediate=True) as db:
        result = json.loads(db.execute("SELECT result_json FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
        result["epsilons"]["naive"] = LARGEST
        db.execute("UPDATE runs SET result_json = ? WHERE id = ?", (json.dumps(result), run_id))
    store.append_metrics(run_id, [(t, {"epsilon_naive": LARGEST}) for t in range(3)])
    return run_id


@pytest.mark.parametrize("private", [False, True])
def test_an_export_writes_an_older_records_unbounded_epsilon_as_infinity(tmp_path, private):
    source = Store(tmp_path / "source.sqlite3")
    run_id = legacy_run(source)
    assert source.get_run(run_id).result["epsilons"]["naive"] == LARGEST
    members = unzip(prepare_export(source, [run_id], include_private_diagnostics=private).data)
    text = members["runs.json"].decode()
    assert "e+308" not in text and '"naive": Infinity' in text
    csv = members[f"metrics/{run_id}.csv"].decode()
    assert "e+308" not in csv and "epsilon_naive,inf" in csv
    target = Store(tmp_path / "target.sqlite3")
    import_runs(target, prepare_export(source, [run_id], include_private_diagnostics=private).data)
    assert target.get_run(run_id).result["epsilons"]["naive"] == math.inf
    assert {v for _, n, v in target.metrics(run_id) if n == "epsilon_naive"} == {math.inf}


def test_the_run_commands_print_an_older_records_unbounded_epsilon_as_infinity(store, capsys):
    run_id = legacy_run(store)  # the CLI's store: DPLAB_HOME
    code, runs = cli_json(capsys, "runs")
    assert code == 0 and [r["result"]["epsilons"]["naive"] for r in runs if r["id"] == run_id] == [math.inf]
    code, out, _ = run_cli(capsys, "show", run_id, "--metrics", "--json")
    assert code == 0 and "e+308" not in out and '"naive": Infinity' in out
    shown = json.loads(out.strip().splitlines()[-1])
    assert {m["value"] for m in shown["metrics"] if m["name"] == "epsilon_naive"} == {math.inf}
    assert store.get_run(run_id).status is RunStatus.FINISHED  # nothing in the store changed

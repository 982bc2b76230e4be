"""The utility suite's planning and records (no training): budgets filled to the last step that fits,
the σ-ceiling fallback, target checks and the summary table."""

from dataclasses import replace

import pytest

from bench.utility import epsilon_only, fill, resolve, run_records, summary_table, target_met
from bench.utility_runs import ABADI_MNIST, NOISY_GD, OPACUS, PRESETS, TUNED, TUNING_CAVEAT, Run
from engine.privacy import SIGMA_MAX, final_epsilon
from engine.training import TrainResult, dataset_info, parse_spec, plan_run

N_DIGITS = dataset_info("digits").n_train
DIGITS = {
    "dataset": "digits",
    "model": "logreg",
    "algorithm": "dpsgd",
    "delta": 1e-5,
    "clip_norm": 1.0,
    "lot_size": 64,
    "lr": 2.0,
    "seed": 0,
}


def result(accuracy: float, epsilon: float | None) -> TrainResult:
    return TrainResult(
        algorithm="dpsgd",
        private=epsilon is not None,
        test_accuracy=accuracy,
        test_loss=0.3,
        epsilon=epsilon,
        delta=1e-5,
        noise_multiplier=1.0,
        sampling_rate=0.01,
        steps=100,
        planned_steps=100,
        accountant="pld" if epsilon is not None else None,
        epsilons={"pld": epsilon} if epsilon else {},
        best_order=None,
        order_at_edge=False,
        privacy_statement="",
        stopped_early=False,
        seconds=1.5,
        device="cpu",
    )


def test_fill_trains_the_most_steps_the_budget_allows():
    spec, plan, budget = fill(
        {**DIGITS, "noise_multiplier": 1.0}, target_epsilon=2.0, max_epochs=1000, n_train=N_DIGITS
    )
    assert not budget.capped and budget.epochs == spec["epochs"] == budget.epochs_within_budget
    longer = plan_run(parse_spec({**spec, "epochs": 1000}), n_train=N_DIGITS)
    epsilon = final_epsilon(plan.ledger(), delta=1e-5, accountant_name=budget.accountant)
    one_more = final_epsilon(longer.ledger(plan.steps + 1), delta=1e-5, accountant_name=budget.accountant)
    assert epsilon <= 2.0 < one_more


def test_fill_caps_the_epochs():
    spec, _, budget = fill({**DIGITS, "noise_multiplier": 1.0}, target_epsilon=2.0, max_epochs=0.5, n_train=N_DIGITS)
    assert budget.capped and spec["epochs"] == pytest.approx(0.5, abs=64 / N_DIGITS)
    assert budget.epochs_within_budget > 0.5


def test_an_unreachable_target_trains_at_the_sigma_ceiling():
    item = Run(name="t", source="test", spec={**DIGITS, "lot_size": N_DIGITS, "epochs": 1000, "target_epsilon": 0.05})
    spec, plan, budget = resolve(item, n_train=N_DIGITS, quick=False)
    assert "target_epsilon" not in spec and plan.noise_multiplier == SIGMA_MAX
    assert 1 <= plan.steps < 1000 and budget is not None
    assert final_epsilon(plan.ledger(), delta=1e-5, accountant_name=budget.accountant) <= 0.05


def test_quick_epochs_replace_the_budget():
    spec, plan, budget = resolve(ABADI_MNIST[0], n_train=60_000, quick=True)
    assert spec["epochs"] == ABADI_MNIST[0].quick_epochs and budget is None and plan.steps == 300


def test_target_needs_accuracy_and_the_budget():
    item = Run(name="t", source="test", spec=DIGITS, target_accuracy=0.9, target_epsilon=1.0)
    assert target_met(item, result(0.91, 0.99)) is True
    assert target_met(item, result(0.89, 0.99)) is False
    assert target_met(item, result(0.91, 1.01)) is False
    assert target_met(replace(item, target_accuracy=None), result(0.91, 0.5)) is None


def test_records_and_summary():
    item = Run(
        name="t", source="test", spec={**DIGITS, "epochs": 3}, target_accuracy=0.9, target_epsilon=1.0, tuned=True
    )
    records = run_records(item, item.spec, result(0.95, 0.8), budget=None, planning_s=0.1, check_target=True)
    by_name = {r["name"]: r for r in records}
    accuracy = by_name["utility/t/test_accuracy"]
    assert accuracy["target_met"] is True and accuracy["caveat"] == TUNING_CAVEAT and accuracy["epochs"] == 3
    assert by_name["utility/t/epsilon_pld"]["value"] == 0.8
    assert by_name["utility/t/met_target_accuracy_0.9_at_epsilon_1"]["value"] == 1.0
    table = summary_table(records)
    assert "| t* | 0.9500 | 0.800 (pld) | 3 | 1.5 | ≥ 0.9 at ε ≤ 1 | yes |" in table
    quick = run_records(item, item.spec, result(0.5, 0.8), budget=None, planning_s=0.1, check_target=False)
    assert not any("met_target" in r["name"] for r in quick)


def test_run_definitions_are_valid_specs():
    runs = [*PRESETS, *ABADI_MNIST, *TUNED, *NOISY_GD, *OPACUS]
    assert len({r.name for r in runs}) == len(runs)
    for item in runs:
        spec = dict(item.spec)
        spec.setdefault("epochs", 1)
        parse_spec(spec)  # no dataset is read


def test_a_slow_run_reports_its_epsilon_untrained():
    item = Run(name="s", source="test", spec={**DIGITS, "noise_multiplier": 1.0, "epochs": 2}, slow=True)
    [record] = epsilon_only(item)
    assert record["trained"] is False and record["name"] == f"utility/s/epsilon_{record['accountant']}"
    assert record["value"] == min(record["epsilons"].values())
    assert "| s | not trained |" in summary_table([record])

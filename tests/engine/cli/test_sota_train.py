"""A run with every state-of-the-art key trains end to end from the command line: augmented copies, averaged
iterates and a filled budget, its ε within the target by the accountant that filled it, and said so on stderr."""

import json

from engine.privacy import final_epsilon
from engine.training import parse_spec, plan_spec
from tests.helpers import cli, fast_spec


def test_train_with_augmentation_averaging_and_a_filled_budget(tmp_path):
    spec = {k: v for k, v in fast_spec().items() if k != "target_epsilon"} | {
        "noise_multiplier": 1.0,
        "target_epsilon": 1.0,
        "fill_budget": True,
        "epochs": 30,
        "augmentation_multiplicity": 2,
        "ema_decay": 0.9,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    done = cli(tmp_path / "home", "train", "--quiet", str(path))
    plan = plan_spec(parse_spec(spec))
    result = json.loads(done.stdout)
    assert f"epochs filled from the budget: {plan.epoch_of(plan.steps):.1f}" not in done.stderr  # --quiet says nothing
    assert result["steps"] == plan.steps < plan.steps_cap and result["epsilon"] <= 1.0
    assert final_epsilon(plan.ledger(), delta=plan.delta, accountant_name=plan.filled_by) <= 1.0
    assert 0.0 < result["test_accuracy"] <= 1.0
    loud = cli(tmp_path / "home", "train", "--force", str(path))
    assert f"epochs filled from the budget: {plan.epoch_of(plan.steps):.1f} ({plan.filled_by.upper()})" in loud.stderr
    assert json.loads(loud.stdout)["test_accuracy"] == result["test_accuracy"]  # lab mode: the same run again

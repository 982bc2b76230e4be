"""The spec keys of state-of-the-art DP-SGD: `augmentation_multiplicity`, `ema_decay` and `fill_budget` are
validated with named errors, leave an older spec's canonical form and cache key as they were, charge nothing
(augmentation and averaging leave the ledger and every ε unchanged), fill a budget to the most steps within the
target, and keep such runs out of stacks."""

import dataclasses

import pytest

from engine.jobs.run_schema import check_plan
from engine.jobs.sweep import expand_sweep
from engine.privacy import UnreachableTargetError, panel
from engine.training import SpecError, parse_spec, plan_spec, stack_key
from engine.training.config.plan import budget_fill_text
from tests.helpers import fast_spec


def sigma_spec(**changes) -> dict:
    """The digits demo at σ = 1 instead of a target ε, with `changes` applied."""
    return {k: v for k, v in fast_spec().items() if k != "target_epsilon"} | {"noise_multiplier": 1.0} | changes


NONPRIVATE = {
    "dataset": "digits",
    "model": "logreg",
    "algorithm": "nonprivate",
    "lot_size": 64,
    "epochs": 2,
    "lr": 0.5,
    "seed": 3,
}
ANISO = {
    "dataset": "digits",
    "model": "logreg",
    "algorithm": "aniso_dpsgd",
    "noise_multiplier": 1.0,
    "delta": 1e-5,
    "clip_norm": 1.0,
    "lot_size": 64,
    "epochs": 2,
    "lr": 1.0,
    "seed": 0,
}
# cache keys (engine version "0.0-test") of specs written before these keys existed, computed by the engine as it
# was then: the off values of the new keys, given or not, must keep them
OLD_CACHE_KEYS = [
    (fast_spec(), "c1eff52f868235a5fa834539055acda56f356df77f31ffee2924bda576159ec7"),
    (
        sigma_spec(model="mlp", hidden=[32], optimizer="momentum") | {"noise_multiplier": 1.1},
        "1ed2c45f5687c07f27ad95383ec1601eaed9ef19e66ea1fb3d43ab334f609fbe",
    ),
    (NONPRIVATE, "78983a2b19880db38bc21512276fb255c3ac35df5b045082ece1b2f4a5dc0e67"),
    (ANISO, "7dd94b58c741e05e72f384071d7399182bf1f339063ddbb719cad54b94f90c61"),
    (
        fast_spec(calibration_accountant="pld", clipping="per_layer"),
        "799f1d376d0ed8acf65764f09bf8b50c2ea253bcf004f7dbef543e7321f48987",
    ),
]


@pytest.mark.parametrize(("raw", "key"), OLD_CACHE_KEYS)
def test_an_older_spec_keeps_its_canonical_form_and_cache_key(raw, key):
    spec = parse_spec(raw)
    assert spec.cache_key("0.0-test") == key
    off = {"ema_decay": 0}
    if raw["algorithm"] == "dpsgd":
        off |= {"augmentation_multiplicity": 1, "fill_budget": False}
    with_off = parse_spec(raw | off)
    assert with_off.cache_key("0.0-test") == key and with_off.canonical_json() == spec.canonical_json()
    assert not set(off) & set(with_off.to_dict())


def test_the_keys_at_other_values_are_in_the_canonical_spec_and_round_trip():
    spec = parse_spec(sigma_spec(augmentation_multiplicity=4, ema_decay=0.99, fill_budget=True, target_epsilon=3.0))
    stored = spec.to_dict()
    assert stored["augmentation_multiplicity"] == 4 and stored["ema_decay"] == 0.99 and stored["fill_budget"] is True
    assert parse_spec(stored) == spec
    assert spec.cache_key("x") != parse_spec(sigma_spec(ema_decay=0.99)).cache_key("x")


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        (fast_spec(augmentation_multiplicity=0), "augmentation_multiplicity", "[1, 64]"),
        (fast_spec(augmentation_multiplicity=65), "augmentation_multiplicity", "[1, 64]"),
        (fast_spec(augmentation_multiplicity=2.5), "augmentation_multiplicity", "an integer"),
        (fast_spec(dataset="adult", delta=1e-6, augmentation_multiplicity=2), "augmentation_multiplicity", "images"),
        (
            fast_spec(dataset="mnist", delta=1e-6, features="scatternet", augmentation_multiplicity=2),
            "augmentation_multiplicity",
            "pixels",
        ),
        (fast_spec(pca_dims=10, pca_noise=4.0, augmentation_multiplicity=2), "augmentation_multiplicity", "pca"),
        (NONPRIVATE | {"augmentation_multiplicity": 2}, "augmentation_multiplicity", "does not apply"),
        (ANISO | {"augmentation_multiplicity": 2}, "augmentation_multiplicity", "does not apply"),
        (fast_spec(ema_decay=1.0), "ema_decay", "[0, 1)"),
        (fast_spec(ema_decay=-0.1), "ema_decay", "[0, 1)"),
        (fast_spec(ema_decay="high"), "ema_decay", "a number"),
        (NONPRIVATE | {"ema_decay": 1}, "ema_decay", "[0, 1)"),
        (
            {"dataset": "digits", "algorithm": "expmech_stumps", "delta": 1e-5, "target_epsilon": 1.0, "seed": 0}
            | {"ema_decay": 0.9},
            "ema_decay",
            "does not apply",
        ),
        (fast_spec(fill_budget="yes"), "fill_budget", "true or false"),
        (fast_spec(fill_budget=1), "fill_budget", "true or false"),
        (fast_spec(fill_budget=True), "noise_multiplier", "fill_budget needs both"),
        (sigma_spec(fill_budget=True), "target_epsilon", "fill_budget needs both"),
        (sigma_spec(target_epsilon=3.0), "target_epsilon", "exactly one"),
        (sigma_spec(target_epsilon=3.0, fill_budget=False), "target_epsilon", "exactly one"),
        (
            sigma_spec(target_epsilon=3.0, fill_budget=True, calibration_accountant="pld"),
            "calibration_accountant",
            "does not apply with fill_budget",
        ),
        (sigma_spec(target_epsilon=500.0, fill_budget=True), "target_epsilon", "[0.01, 100]"),
        (NONPRIVATE | {"fill_budget": True}, "fill_budget", "does not apply"),
        (ANISO | {"fill_budget": True, "target_epsilon": 3.0}, "fill_budget", "does not apply"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(raw, field, fragment):
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert info.value.field == field
    assert fragment in str(info.value), str(info.value)


def test_the_keys_apply_where_they_should():
    assert (
        parse_spec(fast_spec(dataset="cifar10", delta=1e-6, augmentation_multiplicity=16)).augmentation_multiplicity
        == 16
    )
    for raw in (NONPRIVATE, ANISO, fast_spec()):
        assert parse_spec(raw | {"ema_decay": 0.999}).ema_decay == 0.999


def ledger_and_epsilons(raw: dict):
    plan = plan_spec(parse_spec(raw))
    ledger = plan.ledger()
    return plan.noise_multiplier, plan.steps, ledger, panel(ledger, delta=plan.delta).final()


@pytest.mark.parametrize("base", [sigma_spec(epochs=1), fast_spec(epochs=1)], ids=["sigma", "target"])
def test_augmentation_and_averaging_charge_nothing(base):
    plain = ledger_and_epsilons(base)
    assert ledger_and_epsilons(base | {"augmentation_multiplicity": 4}) == plain
    assert ledger_and_epsilons(base | {"ema_decay": 0.99}) == plain


def test_a_filled_budget_trains_the_most_steps_within_the_target():
    spec = parse_spec(sigma_spec(epochs=100, target_epsilon=3.0, fill_budget=True))
    plan = plan_spec(spec)
    assert plan.noise_multiplier == 1.0 and plan.calibrated_by is None
    assert 1 < plan.steps < plan.steps_cap == plan_spec(parse_spec(sigma_spec(epochs=100))).steps
    assert sum(count for _, count in plan.noise_phases) == plan.steps
    within = panel(plan.ledger(), delta=plan.delta)
    assert within.tightest()[1] <= 3.0
    one_more = dataclasses.replace(plan, steps=plan.steps + 1, noise_phases=((1.0, plan.steps + 1),)).ledger()
    assert panel(one_more, delta=plan.delta).tightest()[1] > 3.0
    by = plan.filled_by
    assert by in ("pld", "rdp") and panel(plan.ledger(), delta=plan.delta, names=(by,)).final()[by] <= 3.0
    summary = plan.summary()
    assert summary["steps_filled_by"] == by and summary["filled_epochs"] == pytest.approx(plan.epoch_of(plan.steps))
    assert budget_fill_text(summary) == f"epochs filled from the budget: {plan.epoch_of(plan.steps):.1f} ({by.upper()})"


def test_a_budget_larger_than_the_epochs_allow_is_capped_by_them():
    plan = plan_spec(parse_spec(sigma_spec(epochs=2, target_epsilon=3.0, fill_budget=True)))
    assert plan.steps == plan.steps_cap == plan_spec(parse_spec(sigma_spec(epochs=2))).steps
    assert panel(plan.ledger(), delta=plan.delta).tightest()[1] <= 3.0
    assert budget_fill_text(plan.summary()).endswith("capped by the spec's epochs")
    assert budget_fill_text(plan_spec(parse_spec(sigma_spec(epochs=2))).summary()) is None


def test_a_budget_smaller_than_one_step_is_refused_by_name():
    spec = parse_spec(sigma_spec(noise_multiplier=0.3, target_epsilon=0.05, fill_budget=True))
    with pytest.raises(UnreachableTargetError, match=r"target_epsilon=0\.05 is unreachable with fill_budget"):
        plan_spec(spec)


@pytest.mark.parametrize(
    "change", [{"augmentation_multiplicity": 2}, {"ema_decay": 0.9}, {"fill_budget": True, "target_epsilon": 3.0}]
)
def test_runs_with_these_keys_train_alone(change):
    assert stack_key(parse_spec(sigma_spec())) is not None
    assert stack_key(parse_spec(sigma_spec(**change))) is None


def test_a_filled_plan_is_a_plan_every_page_reads():
    summary = plan_spec(parse_spec(sigma_spec(epochs=2, target_epsilon=3.0, fill_budget=True))).summary()
    check_plan(summary)  # raises RunShapeError on a field of the wrong type
    assert summary["steps_filled_by"] in ("pld", "rdp") and summary["steps_cap"] == summary["steps"]


def test_a_sweep_over_sigma_keeps_the_target_of_a_filled_budget():
    base = sigma_spec(epochs=2, target_epsilon=3.0, fill_budget=True)
    points = expand_sweep({"base": base, "grid": {"noise_multiplier": [0.8, 1.5]}})
    assert [(p.spec["noise_multiplier"], p.spec["target_epsilon"]) for p in points] == [(0.8, 3.0), (1.5, 3.0)]
    plain = expand_sweep({"base": sigma_spec(), "grid": {"target_epsilon": [1.0]}})
    assert "noise_multiplier" not in plain[0].spec  # without fill_budget they stay alternatives

"""Private hyperparameter search in a grid spec: validation naming the field, the trials it draws (configurations
uniform over the grid, fresh distinct seeds), the sweep's ε against dp-accounting's `RepeatAndSelectDpEvent`
built from the stored plan, and what a fixed grid's best run costs."""

import math

import numpy as np
import pytest
import scipy.stats
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from engine.jobs.release import RunToRelease
from engine.jobs.search import SweepPrivacy, draw_trials, parse_search
from engine.jobs.sweep import SweepError, expand_sweep, privacy_of_sweep, submit_sweep
from engine.privacy.selection import TrialCount
from engine.training import parse_spec, plan_spec
from tests.helpers import fast_spec

ALPHA = 1e-4  # the statistical test's false-failure rate


def base() -> dict:
    spec = {k: v for k, v in fast_spec(epochs=2).items() if k != "target_epsilon"}
    return spec | {"noise_multiplier": 1.2}


def search_grid(**search) -> dict:
    return {
        "base": base(),
        "grid": {"lr": [0.5, 1.0, 2.0], "clip_norm": [0.5, 1.0]},
        "search": {"distribution": "negative_binomial", "mean": 4, "shape": 0.5} | search,
    }


@pytest.mark.parametrize(
    ("search", "field"),
    [
        ("poisson", "search: must be a JSON object"),
        ({"distribution": "binomial", "mean": 3}, "search.distribution"),
        ({"distribution": "poisson"}, "search.mean"),
        ({"distribution": "poisson", "mean": 0.5}, "search.mean"),
        ({"distribution": "poisson", "mean": True}, "search.mean"),
        ({"distribution": "logarithmic", "mean": 50}, "search.mean: mean 50 is too large"),
        ({"distribution": "poisson", "mean": 3, "shape": 1}, "search.shape"),
        ({"distribution": "negative_binomial", "mean": 3, "shape": 0}, "search.shape"),
        ({"distribution": "poisson", "mean": 3, "trials": 3}, "search.trials: unknown key"),
    ],
)
def test_bad_searches_name_their_field(search, field):
    with pytest.raises(SweepError, match=field.replace(".", r"\.")):
        expand_sweep({"base": base(), "grid": {"lr": [1.0]}, "search": search})


def test_a_search_draws_its_own_seeds():
    with pytest.raises(SweepError, match="seeds: a private search draws"):
        expand_sweep(search_grid() | {"seeds": [0, 1]})


def test_the_default_shape_is_filled_in():
    assert parse_search({"distribution": "negative_binomial", "mean": 3}).shape == 0.5


def test_trials_are_grid_points_with_fresh_distinct_seeds(monkeypatch):
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 40)
    points = expand_sweep(search_grid())
    assert len(points) == 40
    seeds = [p.values["seed"] for p in points]
    assert len(set(seeds)) == 40
    for point in points:
        assert point.values["lr"] in (0.5, 1.0, 2.0) and point.values["clip_norm"] in (0.5, 1.0)
        assert point.spec == base() | point.values
    again = [p.values["seed"] for p in expand_sweep(search_grid())]
    assert set(again) != set(seeds), "every launch draws again, from OS randomness"


def test_configurations_are_drawn_uniformly(monkeypatch):
    """1,000 trials over 6 configurations: chi-square against uniform; fails by chance with probability ALPHA."""
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 1000)
    configurations = [{"lr": lr} for lr in range(6)]
    drawn = draw_trials(configurations, parse_search({"distribution": "poisson", "mean": 5}))
    counts = np.bincount([t["lr"] for t in drawn], minlength=6)
    assert scipy.stats.chisquare(counts).pvalue > ALPHA, counts


def test_the_search_epsilon_is_dp_accountings_repeat_and_select_of_the_plan():
    """ε-invariant parameters (learning rate, C): every configuration has the plan's one mechanism."""
    found = privacy_of_sweep(search_grid())
    plan = plan_spec(parse_spec(base() | {"seed": 0}))
    step = dp_event.PoissonSampledDpEvent(plan.lot_size / plan.n_train, dp_event.GaussianDpEvent(plan.noise_multiplier))
    repeated = dp_event.RepeatAndSelectDpEvent(dp_event.SelfComposedDpEvent(step, plan.steps), mean=4, shape=0.5)
    assert found.searching and found.search.configurations == 6
    assert found.headline_epsilon == pytest.approx(RdpAccountant().compose(repeated).get_epsilon(plan.delta), rel=1e-9)
    assert "however many trials run" in found.sentence()


def test_a_fixed_grid_trained_apart_costs_the_composition_of_every_run():
    raw = {"base": base(), "grid": {"lr": [0.5, 1.0]}, "seeds": [0, 1, 2], "vectorize": False}
    found = privacy_of_sweep(raw)
    assert found.stacks == 0 and found.separate_epsilon == found.composition_epsilon
    plan = plan_spec(parse_spec(base() | {"seed": 0}))
    one = RdpAccountant().compose(plan.ledger().dp_event())
    six = RdpAccountant().compose(dp_event.SelfComposedDpEvent(plan.ledger().dp_event(), 6))
    assert not found.searching and found.runs == 6
    assert one.get_epsilon(plan.delta) < found.composition_epsilon <= six.get_epsilon(plan.delta) * (1 + 1e-9)
    assert found.headline_epsilon == found.composition_epsilon
    assert found.search.trials.mean == 6  # the private search offered instead: as many trials on average
    assert "composition of every run" in found.sentence() and "A private search" in found.sentence()


def test_a_stacked_fixed_grid_costs_its_stacks_joint_mechanism_and_offers_training_apart(monkeypatch):
    """σ ∈ {0.8, 1.2, 2} × 2 seeds: one stack of 6 (one lot per step for all six), so picking the best costs the
    joint sampled Gaussian at σ_joint = (Σ σₖ⁻²)^−½, built here from the plan with dp-accounting; trained apart,
    the six compose as independent runs, for less."""
    monkeypatch.setenv("DPLAB_STACK_MAX", "8")
    grid = {"noise_multiplier": [0.8, 1.2, 2.0]}
    raw = {"base": base(), "grid": grid, "seeds": [0, 1]}
    found = privacy_of_sweep(raw)
    plan = plan_spec(parse_spec(base() | {"seed": 0}))
    sigma_joint = (2 * sum(s**-2 for s in grid["noise_multiplier"])) ** -0.5
    joint = dp_event.PoissonSampledDpEvent(plan.sampling_rate, dp_event.GaussianDpEvent(sigma_joint))
    expected = RdpAccountant().compose(dp_event.SelfComposedDpEvent(joint, plan.steps)).get_epsilon(plan.delta)
    assert found.stacks == 1 and found.runs == 6
    assert found.composition_accountant in ("rdp", "pld")
    assert found.composition_epsilon <= expected * (1 + 1e-9)  # the tightest of RDP and PLD: RDP's at most
    assert found.composition_epsilon >= 0.85 * expected  # PLD is 8–10% below RDP, never a different mechanism
    apart = [
        dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(plan.sampling_rate, dp_event.GaussianDpEvent(s)), plan.steps
        )
        for s in grid["noise_multiplier"]
        for _ in range(2)
    ]
    separately = RdpAccountant().compose(dp_event.ComposedDpEvent(apart)).get_epsilon(plan.delta)
    assert found.separate_epsilon <= separately * (1 + 1e-9) < found.composition_epsilon
    assert found.headline_epsilon == found.composition_epsilon
    assert "joint ledger" in found.sentence() and "separately" in found.sentence()
    assert privacy_of_sweep(raw | {"vectorize": False}).composition_epsilon == found.separate_epsilon
    stacked = found.to_dict()["fixed_grid"]
    assert stacked["stacks"] == 1 and stacked["separately"]["epsilon"] == found.separate_epsilon


def test_a_non_private_configuration_has_no_bound():
    nonprivate = {"dataset": "digits", "model": "logreg", "algorithm": "nonprivate", "epochs": 1, "lot_size": 64}
    raw = {"base": nonprivate, "grid": {"lr": [0.5, 1.0]}, "seeds": [0]}
    found: SweepPrivacy = privacy_of_sweep(raw)
    assert math.isinf(found.composition_epsilon) and math.isinf(found.search.epsilon)
    assert "ε = ∞" in found.sentence()


def test_a_search_is_submitted_as_its_trials(store, monkeypatch):
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 3)
    submission = submit_sweep(store, search_grid() | {"name": "lr search"})
    assert len(submission.run_ids) == 3 and submission.created == 3
    assert submission.stacks == 0, "trials must be independent runs: they never share a stack's lots"
    sweep = store.get_sweep(submission.sweep_id)
    assert sweep.spec["search"] == {"distribution": "negative_binomial", "mean": 4, "shape": 0.5}
    assert "seeds" not in sweep.spec


def test_a_trained_search_costs_repeat_and_select_of_its_trials_stored_plans(store, monkeypatch):
    """The headline against dp-accounting rebuilt from what the store recorded for the trials that ran."""
    from engine.jobs.workers.worker import Worker

    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 2)
    raw = {"base": base() | {"epochs": 1}, "grid": {"lr": [0.5, 2.0]}, "search": {"distribution": "poisson", "mean": 2}}
    submission = submit_sweep(store, raw)
    worker = Worker(store, data_dirs=[])
    while worker.run_one():
        pass
    runs = store.list_runs(sweep_id=submission.sweep_id)
    assert [r.status.value for r in runs] == ["finished", "finished"]
    plans = {(r.plan["sampling_rate"], r.plan["noise_multiplier"], r.plan["steps"], r.plan["delta"]) for r in runs}
    [(q, sigma, steps, delta)] = plans  # the learning rate changes no ledger
    step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    repeated = dp_event.RepeatAndSelectDpEvent(dp_event.SelfComposedDpEvent(step, steps), mean=2, shape=math.inf)
    expected = RdpAccountant().compose(repeated).get_epsilon(delta)
    found = privacy_of_sweep(store.get_sweep(submission.sweep_id).spec)
    assert found.headline_epsilon == pytest.approx(expected, rel=1e-9)
    assert found.headline_epsilon > max(r.result["epsilon"] for r in runs)
    # After the draw: K = 2 is independent of the data, so the two trials' composition bounds the release too
    drawn = privacy_of_sweep(
        store.get_sweep(submission.sweep_id).spec,
        [RunToRelease.of_record(r.spec, stack=r.stack_id, plan=r.plan) for r in runs],
    )
    both = RdpAccountant().compose(dp_event.SelfComposedDpEvent(dp_event.SelfComposedDpEvent(step, steps), 2))
    assert drawn.drawn_trials == 2 and drawn.drawn_epsilon <= both.get_epsilon(delta) * (1 + 1e-9)
    assert drawn.headline_epsilon == min(drawn.drawn_epsilon, drawn.search.epsilon) < expected
    assert drawn.headline_delta == delta  # the composition's δ, without the trial cap's term
    assert "2 trials drawn compose" in drawn.sentence()

"""Private hyperparameter search in a grid spec: validation naming the field, the trials it draws (configurations
uniform over the grid, fresh distinct seeds), the sweep's ε against dp-accounting's `RepeatAndSelectDpEvent`
built from the stored plan, and what a fixed grid's best run costs."""

import math

import numpy as np
import pytest
import scipy.stats
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

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


def test_a_fixed_grid_costs_the_composition_of_every_run():
    raw = {"base": base(), "grid": {"lr": [0.5, 1.0]}, "seeds": [0, 1, 2]}
    found = privacy_of_sweep(raw)
    plan = plan_spec(parse_spec(base() | {"seed": 0}))
    one = RdpAccountant().compose(plan.ledger().dp_event())
    six = RdpAccountant().compose(dp_event.SelfComposedDpEvent(plan.ledger().dp_event(), 6))
    assert not found.searching and found.runs == 6
    assert one.get_epsilon(plan.delta) < found.composition_epsilon <= six.get_epsilon(plan.delta) * (1 + 1e-9)
    assert found.headline_epsilon == found.composition_epsilon
    assert found.search.trials.mean == 6  # the private search offered instead: as many trials on average
    assert "composition of every run" in found.sentence() and "A private search" in found.sentence()


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

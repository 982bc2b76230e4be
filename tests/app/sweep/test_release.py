"""What releasing a sweep's best run costs, on the Sweep page: before launch (fixed grid and private search), as
the headline of a sweep in the store, and when a search's trials did not all run."""

import math

import pytest

from app.common.safe_text import unescape
from cache import RunStatus
from engine.jobs.naming import generated_run_name, generated_sweep_name
from engine.jobs.release import RunToRelease
from engine.jobs.search import trials_composition
from engine.jobs.sweep import privacy_of_sweep, submit_sweep
from engine.privacy import epsilon_text
from engine.privacy.selection import TrialCount
from tests.apptest_helpers import open_page
from tests.helpers import fast_spec


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def stored(runs) -> list[RunToRelease]:
    return [RunToRelease.of_record(run.spec, stack=run.stack_id, plan=run.plan) for run in runs]


def test_a_fixed_grid_states_the_composition_and_the_private_search_instead(home, store):
    at = open_page("sweep")
    [note] = [i.value for i in at.info if "Releasing the best run" in i.value]
    assert "Releasing the best of a fixed grid of 10 runs costs ε = " in note
    assert "composition of every run" in note and "A private search" in note
    assert at.number_input(key="sweep_seeds").value == 2
    if "vectorized stack" in note:  # the default grid stacks: training apart is offered, with its ε
        assert any("Cheaper selection: untick *Train compatible points together*" in c.value for c in at.caption)


def test_a_private_search_is_designed_previewed_and_launched(home, store, monkeypatch):
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 3)
    at = open_page("sweep")
    at.radio(key="sweep_mode").set_value("search").run()
    assert not at.exception, at.exception
    keys = {w.key for w in at.number_input} | {w.key for w in at.selectbox}
    assert "sweep_seeds" not in keys and {"sweep_trial_distribution", "sweep_trial_mean", "sweep_trial_shape"} <= keys
    assert all(at.number_input(key=k).help for k in ("sweep_trial_mean", "sweep_trial_shape"))
    assert any(
        "**A private search** over 5 configurations" in i.value and "truncated negative binomial" in i.value
        for i in at.info
    ), [i.value for i in at.info]
    [note] = [i.value for i in at.info if "Releasing the best run" in i.value]
    assert "Releasing the best of a private search" in note and "however many trials run" in note

    at.selectbox(key="sweep_trial_distribution").set_value("geometric").run()
    at.number_input(key="sweep_trial_mean").set_value(4.0).run()
    assert "sweep_trial_shape" not in {w.key for w in at.number_input}
    at.button(key="sweep_launch").click().run()
    assert not at.exception, at.exception
    [sweep] = store.list_sweeps()
    assert sweep.spec["search"] == {"distribution": "geometric", "mean": 4.0} and "seeds" not in sweep.spec
    assert len(sweep.run_ids) == 3
    expected = privacy_of_sweep(sweep.spec, stored(store.list_runs(sweep_id=sweep.id)))
    assert expected.drawn_trials == 3  # the smaller of the search's bound and the three trials' composition
    assert expected.headline_epsilon == min(expected.search.epsilon, expected.drawn_epsilon)
    assert metric(at, "ε of releasing the best run") == f"{expected.headline_epsilon:.3g}"
    assert any("3 trial(s) still to end" in w.value for w in at.warning)


def test_a_search_mean_its_distribution_cannot_draw_is_refused(home, store):
    at = open_page("sweep")
    at.radio(key="sweep_mode").set_value("search").run()
    at.selectbox(key="sweep_trial_distribution").set_value("logarithmic").run()
    at.number_input(key="sweep_trial_mean").set_value(60.0).run()
    assert any("search.mean: mean 60 is too large" in unescape(e.value) for e in at.error), [e.value for e in at.error]
    assert at.button(key="sweep_launch").disabled


def test_the_headline_of_a_finished_grid_is_its_best_run_and_the_composition(trained_store):
    runs = trained_store.list_runs()
    best = max(runs, key=lambda r: r.result["test_accuracy"])
    [sweep] = trained_store.list_sweeps()
    at = open_page("sweep")
    assert not at.exception, at.exception
    expected = privacy_of_sweep(sweep.spec, stored(runs))
    assert metric(at, "ε of releasing the best run") == f"{expected.composition_epsilon:.3g}"
    said = f"Best run so far: {generated_run_name(best.spec)} (`{best.id}`)."  # by its name, the id after it
    assert any(unescape(c.value).startswith(said) for c in at.caption), [c.value for c in at.caption]
    # the picker leads with the sweep's name, the grid table with each run's
    sweep_name = sweep.name or generated_sweep_name(sweep.spec)
    assert at.selectbox(key="sweep_shown").options == [f"{sweep_name} · 2 runs · {sweep.id}"]
    table = next(d.value for d in at.dataframe if "status" in d.value)
    assert list(table["name"]) == [generated_run_name(trained_store.get_run(i).spec) for i in table["run"]]
    assert metric(at, "Best run (test accuracy)") == f"{best.result['test_accuracy']:.2%}"
    # releasing the best of both costs more than either run's own ε
    assert expected.composition_epsilon > max(r.result["epsilon"] for r in runs)


def test_a_search_with_cancelled_trials_costs_the_composition_of_every_trial(home, store, monkeypatch):
    monkeypatch.setattr(TrialCount, "sample", lambda self, rng=None: 2)
    raw = {
        "base": fast_spec(epochs=1),
        "grid": {"lr": [0.5, 1.0]},
        "search": {"distribution": "poisson", "mean": 2},
        "vectorize": False,
    }
    submission = submit_sweep(store, raw)
    for run_id in submission.run_ids:
        assert store.request_cancel(run_id) is RunStatus.CANCELLED
    at = open_page("sweep")
    assert not at.exception, at.exception
    assert any("2 trial(s) were cancelled" in w.value for w in at.warning)
    _, epsilon, _ = trials_composition(stored(store.list_runs()))
    assert metric(at, "ε of releasing the best run") == f"{epsilon:.3g}"
    # the learning rate changes no ledger: two trials compose like the fixed grid of the two configurations
    assert math.isfinite(epsilon) and epsilon == pytest.approx(privacy_of_sweep(raw).composition_epsilon, rel=1e-9)


def test_infinity_reads_as_infinity():
    assert epsilon_text(math.inf) == "∞" and epsilon_text(2.345) == "2.35"

"""An audited run on the Compare frontier: a bar from its audited lower bound ε̂ to its ε, with the reading in
the hover text and the caption; a run without an audit has no bar."""

import pytest

from app.compare.frames import frontier_points
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.apptest_helpers import figures, open_page
from tests.helpers import fast_spec


def test_an_audited_run_shows_the_interval_where_its_true_epsilon_lies(home, store):
    audited = submit(store, parse_spec(fast_spec(epochs=1, audit={"canaries": 400})))
    plain = submit(store, parse_spec(fast_spec(epochs=1, seed=1, target_epsilon=1.5)))
    worker = Worker(store, data_dirs=[])
    worker.run_one()
    worker.run_one()
    runs = {r.id: r for r in store.list_runs()}
    audit = runs[audited.run_id].result["audit"]
    points = frontier_points(list(runs.values())).set_index("run")
    assert points.loc[audited.run_id, "audited"] == audit["epsilon"]
    assert points["audited"].isna().loc[plain.run_id]

    at = open_page("compare")
    at.multiselect(key="compare_runs").set_value(list(runs)).run()
    assert not at.exception, at.exception
    [frontier] = [f for f in figures(at) if "frontier" in f["layout"]["title"]["text"]]
    by_x = {trace["x"][0]: trace for trace in frontier["data"]}
    epsilon = runs[audited.run_id].result["epsilon"]
    bar = by_x[epsilon]["error_x"]
    assert bar["symmetric"] is False and bar["array"] == [0.0]
    assert bar["arrayminus"] == [pytest.approx(epsilon - audit["epsilon"])]
    assert f"audited ε̂ = {audit['epsilon']:.3g} ≤ true ε ≤ {epsilon:.3g}" in by_x[epsilon]["hovertemplate"]
    assert "error_x" not in by_x[runs[plain.run_id].result["epsilon"]]
    assert any("audited lower bound ε̂" in c.value for c in at.caption)

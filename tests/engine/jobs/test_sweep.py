"""Sweeps: a grid spec expands into validated runs that share a sweep id."""

import pytest

from cache import RunStatus
from engine.jobs.submission import submit
from engine.jobs.sweep import MAX_RUNS, SweepError, expand_sweep, submit_sweep
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.helpers import fast_spec


def grid(**overrides):
    raw = {
        "name": "σ × lot",
        "base": fast_spec(epochs=1),
        "grid": {"noise_multiplier": [1.0, 2.0], "lot_size": [32, 64]},
        "seeds": [0, 1],
    }
    raw.update(overrides)
    return raw


def test_two_parameters_times_seeds_expand_in_grid_order():
    points = expand_sweep(grid())
    assert len(points) == 8
    assert [p.values for p in points[:3]] == [
        {"noise_multiplier": 1.0, "lot_size": 32, "seed": 0},
        {"noise_multiplier": 1.0, "lot_size": 32, "seed": 1},
        {"noise_multiplier": 1.0, "lot_size": 64, "seed": 0},
    ]
    assert all("target_epsilon" not in p.spec for p in points), "σ in the grid replaces the base's target ε"


def test_a_sweep_shares_one_id_and_reuses_cached_points(store):
    done = submit(
        store,
        parse_spec(
            {
                **{k: v for k, v in fast_spec(epochs=1).items() if k != "target_epsilon"},
                "noise_multiplier": 1.0,
                "lot_size": 32,
                "seed": 0,
            }
        ),
    )
    Worker(store, data_dirs=[]).run_one()
    sweep = submit_sweep(store, grid())
    assert (sweep.created, sweep.cached, sweep.existing) == (7, 1, 0)
    assert sweep.run_ids[0] == done.run_id
    record = store.get_sweep(sweep.sweep_id)
    assert record.run_ids == sweep.run_ids and record.name == "σ × lot"
    assert record.points[1] == {"noise_multiplier": 1.0, "lot_size": 32, "seed": 1}
    members = store.list_runs(sweep_id=sweep.sweep_id)
    assert [r.id for r in members] == list(sweep.run_ids)
    assert [r.status for r in members].count(RunStatus.QUEUED) == 7
    again = submit_sweep(store, grid())
    assert (again.created, again.existing, again.cached) == (0, 7, 1) and again.run_ids == sweep.run_ids
    forced = submit_sweep(store, grid(), force=True)
    assert forced.created == 8 and not set(forced.run_ids) & set(sweep.run_ids)


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ([1, 2], "sweep", "must be a JSON object"),
        (grid(grid={}), "grid", "1 to 2 spec keys"),
        (grid(grid={"lr": [1], "epochs": [1], "lot_size": [8]}), "grid", "1 to 2 spec keys"),
        (grid(grid={"seed": [1, 2]}), "grid.seed", "seeds go in 'seeds'"),
        (grid(grid={"learning_rate": [1]}), "grid.learning_rate", "not a spec key"),
        (grid(grid={"lr": []}), "grid.lr", "list of 1 to"),
        (grid(grid={"lr": 0.1}), "grid.lr", "list of 1 to"),
        (grid(grid={"lr": [0.1, 0.1]}), "grid.lr", "repeated value"),
        (grid(seeds=[0, 0]), "seeds", "distinct integers"),
        (grid(seeds=["a"]), "seeds", "distinct integers"),
        (grid(seeds=[]), "seeds", "distinct integers"),
        (grid(base=None), "base", "not a JSON object"),
        (grid(colour="red"), "colour", "unknown key"),
        (grid(grid={"lr": list(range(1, 101)), "epochs": list(range(1, 12))}), "grid", f"at most {MAX_RUNS}"),
    ],
)
def test_malformed_grid_specs_name_the_field(raw, field, message, store):
    with pytest.raises(SweepError, match=message) as caught:
        submit_sweep(store, raw)
    assert caught.value.field == field
    assert store.list_runs() == [] and store.list_sweeps() == []


def test_an_invalid_point_names_the_point_and_queues_nothing(store):
    with pytest.raises(SweepError, match=r"grid point lot_size=5000, seed=0: lot_size: .*") as caught:
        submit_sweep(store, grid(grid={"lot_size": [32, 5000]}, seeds=[0]))
    assert "grid point" in caught.value.field
    assert store.list_runs() == [] and store.list_sweeps() == []


def test_points_that_train_the_same_run_are_refused(store):
    with pytest.raises(SweepError, match="train the same run"):
        submit_sweep(store, grid(grid={"lr": [1, 1.0]}, seeds=[0]))

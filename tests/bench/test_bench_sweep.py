"""The sweep suite's records: every mode timed, ratios naming what they compare, on a tiny stand-in
(digits, K = 2, a few steps) so that the test measures the plumbing, not the machine."""

from bench import sweep
from engine.training import load_dataset


def test_the_sweep_suite_records_each_mode_and_its_ratios(monkeypatch):
    monkeypatch.setattr(
        sweep, "QUICK", sweep.Settings(members=2, epochs=0.1, repetitions=1, models=("logreg",), test_examples=100)
    )
    monkeypatch.setattr(sweep, "_dataset", lambda: ("digits", load_dataset("digits", [])))
    grid = sweep.grid
    monkeypatch.setattr(sweep, "grid", lambda k: [(5.0 + s, c) for s, c in grid(k)])  # large σ: cheap final PLD
    records = sweep.run(quick=True)
    by_name = {r["name"]: r for r in records}
    prefix = "sweep logreg digits K=2 (1 steps, 100 test examples, "  # lots of 256 of 1,438: one step
    for part in ("loop", "end to end"):
        times = {
            mode: next(r for n, r in by_name.items() if n.startswith(prefix) and n.endswith(f"{mode}, {part}"))
            for mode in ("one run", "sequential", "stack")
        }
        assert all(r["unit"] == "s" and r["value"] > 0 for r in times.values())
        speedup = next(r for n, r in by_name.items() if n.endswith(f"speed-up of the stack over sequential, {part}"))
        assert (speedup["numerator"], speedup["denominator"], speedup["unit"]) == ("sequential", "stack", "x")
        assert speedup["value"] == times["sequential"]["value"] / times["stack"]["value"]  # one round
        assert speedup["pairs"] == 1 and speedup["spread"] == 0 and speedup["stable"]  # the harness's summary
    assert grid(8) == sorted(set(grid(8)))  # eight distinct (σ, C), σ increasing


def test_the_eager_modes_turn_the_step_graphs_off_and_back_on(monkeypatch):
    """ "one run, eager" and "stack, eager" train without a CUDA graph; the graphs come back afterwards, and only
    the ratios whose two modes ran are reported."""
    from engine.training.algorithms import dpsgd
    from engine.training.trainers.stack import stack_run

    made = {"run": dpsgd.step_graph_for, "stack": stack_run.stack_graph_for}
    with sweep.eager_steps():
        assert dpsgd.step_graph_for(None, None, None) is None
        assert stack_run.stack_graph_for(None, None, None) is None
    assert dpsgd.step_graph_for is made["run"] and stack_run.stack_graph_for is made["stack"]
    settings = sweep.Settings(
        members=2, epochs=0.1, repetitions=1, models=("logreg",), test_examples=100, modes=("one run", "one run, eager")
    )
    monkeypatch.setattr(sweep, "_dataset", lambda: ("digits", load_dataset("digits", [])))
    grid = sweep.grid
    monkeypatch.setattr(sweep, "grid", lambda k: [(5.0 + s, c) for s, c in grid(k)])
    ratios = [r for r in sweep.run(quick=False, settings=settings) if r["unit"] == "x"]
    assert {(r["numerator"], r["denominator"]) for r in ratios} == {("one run", "one run, eager")}

"""The speed suites' timing harness on a fake clock (no wall time is read): blocks calibrated to their length,
each ratio measured pair by pair in alternating order, its spread, and the self-check that flags pairs that
disagree by more than ±10%."""

import pytest
import torch

from bench import timing
from bench.timing import STABLE_WITHIN, Timing, measure, ratio_record, spread, unstable

CPU = torch.device("cpu")


class FakeClock:
    """`time.perf_counter` of bench.timing: each step of a mode advances it by that mode's cost."""

    def __init__(self):
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def step(self, mode: str, cost: float, slow: dict[int, float] | None = None):
        def run() -> None:
            self.calls.append(mode)
            self.now += cost * (slow or {}).get(len(self.calls), 1.0)

        return run


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", fake)
    return fake


def test_blocks_last_about_the_block_time_and_ratios_are_exact_on_a_steady_machine(clock):
    steps = {"a": clock.step("a", 0.001), "b": clock.step("b", 0.004)}
    found = measure(steps, [("b", "a")], Timing(block_s=0.5, pairs=6, min_pairs=2), CPU)
    assert len(found.ratios[("b", "a")]) == 6
    assert found.ratios[("b", "a")] == pytest.approx([0.25] * 6)  # b's throughput is a quarter of a's
    assert found.rates["a"] == pytest.approx([1000.0] * 6) and found.rates["b"] == pytest.approx([250.0] * 6)
    record = ratio_record("p", "b", "a", found.ratios[("b", "a")])
    assert record["value"] == pytest.approx(0.25) and record["spread"] == pytest.approx(0.0) and record["stable"]


def test_pairs_alternate_their_order(clock):
    steps = {"a": clock.step("a", 0.01), "b": clock.step("b", 0.01)}
    measure(steps, [("b", "a")], Timing(block_s=0.02, pairs=4, min_pairs=4, warmup_steps=1), CPU)
    timed = "".join(clock.calls)[-16:]  # 4 pairs × 2 blocks × 2 steps, after warm-up and calibration
    assert timed == "aabb" + "bbaa" + "aabb" + "bbaa"


def test_a_burst_of_load_widens_the_spread_and_the_self_check_flags_it():
    steady = [1.0, 1.01, 0.99, 1.0, 1.0, 1.02, 0.98]
    noisy = [1.0, 0.7, 1.3, 1.0, 0.8, 1.2, 1.0]
    assert spread(steady) < STABLE_WITHIN < spread(noisy)
    records = [ratio_record("s", "x", "y", steady), ratio_record("n", "x", "y", noisy)]
    assert [r["stable"] for r in records] == [True, False]
    assert unstable(records) == ["n/x_vs_y"]
    assert records[1]["compared"].endswith("⚠")


def test_spread_is_half_the_10_to_90_percentile_range_relative_to_the_median():
    assert spread([2.0, 2.0, 2.0, 2.0, 2.0]) == 0.0
    assert spread([1.5, 2.0, 2.0, 2.0, 2.5]) == pytest.approx((2.3 - 1.7) / 2 / 2.0)


def test_repetitions_are_cut_to_the_budget_but_never_below_the_minimum(clock):
    steps = {"a": clock.step("a", 0.001), "b": clock.step("b", 0.001)}
    found = measure(steps, [("b", "a")], Timing(block_s=1.0, pairs=50, budget_s=10.0, min_pairs=3), CPU)
    assert len(found.ratios[("b", "a")]) == 5  # 10 s of budget, 2 s a repetition
    found = measure(steps, [("b", "a")], Timing(block_s=1.0, pairs=50, budget_s=1.0, min_pairs=3), CPU)
    assert len(found.ratios[("b", "a")]) == 3

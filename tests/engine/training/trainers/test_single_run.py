"""End-to-end training: the digits demo spec, determinism, early stop, the MLP path."""

import itertools

import pytest

from engine.privacy import dpsgd_event, rdp_epsilon
from engine.training import parse_spec, train
from tests.helpers import fast_spec


def test_digits_demo_reaches_accuracy_within_budget_deterministically(digits):
    spec = parse_spec(fast_spec())
    records = []
    first = train(spec, dataset=digits, on_step=records.append)
    assert first.test_accuracy >= 0.85
    assert first.epsilon <= 3.0
    assert first.steps == first.planned_steps == 450 and not first.stopped_early
    # σ was calibrated by RDP to ε = 3; the reported ε is the tightest accountant's (PLD), and the
    # RDP one is exactly what dp-accounting says of the event the loop ran.
    expected, _ = rdp_epsilon(
        dpsgd_event(sampling_rate=64 / 1438, noise_multiplier=first.noise_multiplier, steps=450), delta=1e-5
    )
    assert first.epsilons["rdp"] == pytest.approx(expected, rel=1e-9) and expected <= 3.0
    assert first.accountant == "pld" and first.epsilon == first.epsilons["pld"] < expected
    assert "Poisson sampling" in first.privacy_statement and "450 × DP-SGD step" in first.privacy_statement
    assert [r.step for r in records] == list(range(451))
    assert records[-1].epsilon == first.epsilons["rdp"] and records[-1].test_accuracy == first.test_accuracy
    assert all(a.epsilon <= b.epsilon for a, b in itertools.pairwise(records))

    second = train(spec, dataset=digits)
    for field in ("test_accuracy", "test_loss", "epsilon", "noise_multiplier", "steps"):
        assert getattr(second, field) == getattr(first, field), field


def test_stopping_early_reports_the_epsilon_actually_spent(digits):
    raw = fast_spec(noise_multiplier=1.5, epochs=5)
    del raw["target_epsilon"]
    spec = parse_spec(raw)
    calls = []

    def stop_after_ten():
        calls.append(1)
        return len(calls) >= 10

    result = train(spec, dataset=digits, should_stop=stop_after_ten)
    assert result.stopped_early and result.steps == 10 < result.planned_steps
    expected, _ = rdp_epsilon(dpsgd_event(sampling_rate=64 / 1438, noise_multiplier=1.5, steps=10), delta=1e-5)
    assert result.epsilons["rdp"] == pytest.approx(expected, rel=1e-9)
    assert result.epsilon == min(result.epsilons.values()) and "10 × DP-SGD step" in result.privacy_statement


def test_mlp_trains_better_than_chance(digits):
    spec = parse_spec(fast_spec(model="mlp", hidden=[32], lr=1.0, epochs=5))
    result = train(spec, dataset=digits)
    assert result.test_accuracy > 0.5  # 10 classes: chance is 0.1

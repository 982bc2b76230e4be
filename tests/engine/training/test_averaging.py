"""The moving average of the iterates (`engine.training.averaging`, the spec's `ema_decay`): TensorFlow's warm-up
rule against a hand computation, the average as the model every record and the result evaluate, and β = 0 as
the plain run bit for bit."""

import dataclasses

import pytest
import torch
from torch import nn

from engine.training import parse_spec, run_setup, train
from engine.training.averaging import IterateAverage, iterate_average, warmup_decay
from engine.training.trainers import single_run
from tests.helpers import fast_spec


def sigma_spec(**changes) -> dict:
    """The digits demo at σ = 1 for one epoch (23 steps), with `changes` applied."""
    return {k: v for k, v in fast_spec(epochs=1).items() if k != "target_epsilon"} | {"noise_multiplier": 1.0} | changes


NONPRIVATE = {
    "dataset": "digits",
    "model": "logreg",
    "algorithm": "nonprivate",
    "lot_size": 64,
    "epochs": 1,
    "lr": 0.5,
    "seed": 3,
}


def test_the_warm_up_rule_is_tensorflows():
    assert warmup_decay(0.999, 1) == pytest.approx(2 / 11)
    assert warmup_decay(0.999, 90) == pytest.approx(91 / 100)
    assert warmup_decay(0.5, 100) == 0.5


def test_the_average_matches_a_hand_computation():
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.0, 10.0]]))
    average = IterateAverage(model, 0.2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[11.0, 21.0]]))
    average.update()  # β₁ = min(0.2, 2/11) = 2/11: 2/11·(0, 10) + 9/11·(11, 21)
    assert average.model.weight[0].tolist() == pytest.approx([9.0, 19.0])
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[21.0, 1.0]]))
    average.update()  # β₂ = min(0.2, 3/12) = 0.2
    assert average.model.weight[0].tolist() == pytest.approx([0.2 * 9 + 0.8 * 21, 0.2 * 19 + 0.8 * 1])
    assert model.weight.tolist() == [[21.0, 1.0]], "the iterate is left alone"
    assert not average.model.weight.requires_grad


def test_zero_decay_makes_no_average():
    assert iterate_average(nn.Linear(2, 1), 0.0) is None


def without_times(records):
    return [dataclasses.replace(r, elapsed_s=None) for r in records]


def test_zero_decay_is_the_plain_run_bit_for_bit():
    plain, off = [], []
    plain_result = train(parse_spec(sigma_spec()), on_step=plain.append, device=torch.device("cpu"))
    off_result = train(parse_spec(sigma_spec(ema_decay=0.0)), on_step=off.append, device=torch.device("cpu"))
    assert without_times(off) == without_times(plain)
    assert (off_result.test_accuracy, off_result.test_loss) == (plain_result.test_accuracy, plain_result.test_loss)
    assert off_result.epsilon == plain_result.epsilon


@pytest.mark.parametrize("raw", [sigma_spec(ema_decay=0.9), NONPRIVATE | {"ema_decay": 0.9}], ids=["dpsgd", "sgd"])
def test_every_evaluation_is_of_the_average_of_the_iterates(raw, monkeypatch):
    averages, evaluated, iterates = [], [], []

    def recording_average(model, decay):
        average = iterate_average(model, decay)
        averages.append(average)
        update = average.update

        def recorded_update():
            iterates.append([p.detach().clone() for p in model.parameters()])
            update()

        average.update = recorded_update
        return average

    def recording_evaluate(model, x, y):
        evaluated.append(model)
        return original_evaluate(model, x, y)

    original_evaluate = single_run.evaluate
    monkeypatch.setattr(run_setup, "iterate_average", recording_average)
    monkeypatch.setattr(single_run, "evaluate", recording_evaluate)
    records = []
    result = train(parse_spec(raw), on_step=records.append, device=torch.device("cpu"))
    (average,) = averages
    assert evaluated and all(model is average.model for model in evaluated)
    assert average.steps == len(iterates) == result.steps > 1
    expected = [p.detach().clone() for p in average.model.parameters()]
    torch.manual_seed(raw["seed"])  # the initialization, as the trainer draws it
    initial = run_setup.build_run_model(parse_spec(raw), n_features=64, n_classes=10, image_shape=(1, 8, 8))
    hand = [p.detach().clone() for p in initial.parameters()]  # θ̄ ← βₜ θ̄ + (1 − βₜ) θₜ, from θ̄₀ = θ₀
    for t, theta in enumerate(iterates, start=1):
        beta = min(0.9, (1 + t) / (10 + t))
        hand = [beta * a + (1 - beta) * b for a, b in zip(hand, theta, strict=True)]
    for got, want in zip(expected, hand, strict=True):
        torch.testing.assert_close(got, want)
    assert not all(torch.equal(a, b) for a, b in zip(expected, iterates[-1], strict=True)), "the average is no iterate"
    test_records = [r for r in records if r.test_accuracy is not None]
    assert len(test_records) == len(evaluated)
    assert (result.test_accuracy, result.test_loss) == (test_records[-1].test_accuracy, test_records[-1].test_loss)

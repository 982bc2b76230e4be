"""The noise drawn a step ahead (`engine.training.noise_ahead`) is the inline noise stage's, draw for draw: the
same buffers from the same stream in the same order, off the calling thread, never past the last step."""

import threading

import pytest
import torch

from engine.training import noise_ahead, parse_spec, plan_spec, train
from engine.training.algorithms import dpsgd, noisy_gd
from engine.training.noise import PARALLEL_NOISE_MIN, OsStream, add_gaussian_noise
from engine.training.noise_ahead import NoiseAhead, NoiseOrderError
from tests.helpers import blobs_dataset, fast_spec, noisy_gd_spec

SHAPES = [(3 * PARALLEL_NOISE_MIN + 5,), (40, 30), (7,)]  # one drawn in chunks, two whole


def sigma_spec(**overrides) -> dict:
    raw = fast_spec(**overrides)
    raw.pop("target_epsilon")
    return raw


def stds(step: int) -> float:
    return 0.5 + 0.25 * step  # a schedule: each step's σₜCₜ differs


@pytest.mark.parametrize("ahead_from", [0, 10**9], ids=["drawn ahead", "drawn when taken"])
def test_the_draws_are_the_inline_draws_bit_for_bit(ahead_from):
    like = [torch.zeros(shape) for shape in SHAPES]
    inline_stream = torch.Generator().manual_seed(11)
    ahead = NoiseAhead(like, stds, torch.Generator().manual_seed(11), last_step=4, ahead_from=ahead_from)
    assert ahead.ahead is (ahead_from == 0)
    for step in range(1, 5):
        grads = [torch.randn(shape, generator=torch.Generator().manual_seed(step)) for shape in SHAPES]
        expected = add_gaussian_noise([g.clone() for g in grads], stds(step), inline_stream)
        got = ahead.add_to(grads, step)
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_draws_run_off_the_calling_thread_and_stop_at_the_last_step(monkeypatch):
    seen: list[tuple[str, float]] = []
    real = noise_ahead.fill_gaussian_noise

    def spy(buffer, std, source, **kwargs):
        seen.append((threading.current_thread().name, std))
        return real(buffer, std, source, **kwargs)

    monkeypatch.setattr(noise_ahead, "fill_gaussian_noise", spy)
    ahead = NoiseAhead([torch.zeros(4)], stds, torch.Generator().manual_seed(0), last_step=3, ahead_from=4)
    for step in (1, 2, 3):
        ahead.take(step)
    with pytest.raises(NoiseOrderError, match="step 4"):
        ahead.take(4)  # nothing drawn past the plan
    assert [std for _, std in seen] == [stds(1), stds(2), stds(3)]
    assert all(name.startswith("dp-noise-ahead") for name, _ in seen)
    assert threading.current_thread().name not in {name for name, _ in seen}


def test_small_noise_is_drawn_when_taken_on_the_calling_thread(monkeypatch):
    """Below `AHEAD_MIN_COORDINATES` a thread handoff costs more than the draw (logistic regression's 7,850)."""
    seen: list[str] = []
    real = noise_ahead.fill_gaussian_noise
    monkeypatch.setattr(
        noise_ahead,
        "fill_gaussian_noise",
        lambda *a, **k: seen.append(threading.current_thread().name) or real(*a, **k),
    )
    like = [torch.zeros(10, 784), torch.zeros(10)]
    assert sum(t.numel() for t in like) < noise_ahead.AHEAD_MIN_COORDINATES
    ahead = NoiseAhead(like, stds, torch.Generator().manual_seed(0), last_step=3)
    assert seen == []  # nothing drawn before it is taken
    ahead.take(1)
    assert seen == [threading.current_thread().name] * 2


def test_steps_are_taken_in_order():
    ahead = NoiseAhead([torch.zeros(4)], stds, torch.Generator().manual_seed(0), last_step=5)
    with pytest.raises(NoiseOrderError, match="step 2 asked"):
        ahead.take(2)
    ahead.take(1)
    ahead.cancel()
    with pytest.raises(NoiseOrderError):
        ahead.take(2)  # a cancelled stream draws no more


def test_noise_drawn_at_another_std_than_the_step_accounts_for_is_refused():
    ahead = NoiseAhead([torch.zeros(4)], stds, torch.Generator().manual_seed(0), last_step=5)
    ahead.add_to([torch.zeros(4)], 1, stds(1))
    with pytest.raises(NoiseOrderError, match=r"step 2 accounts for noise std 0\.5"):
        ahead.add_to([torch.zeros(4)], 2, 0.5)


def test_release_mode_draws_fresh_noise_ahead():
    ahead = NoiseAhead([torch.zeros(1000)], stds, OsStream("cpu"), last_step=2)
    first, second = ahead.take(1)[0], ahead.take(2)[0]
    assert not torch.equal(first / stds(1), second / stds(2))
    # 1000 N(0, σ²) draws: the sample std within 6 standard errors (√(1/2n)) of σ; false failure ≈ 2e-9
    for noise, step in ((first, 1), (second, 2)):
        assert abs(float(noise.std()) / stds(step) - 1) < 6 * (1 / 2000) ** 0.5


def test_a_run_trains_to_the_same_numbers_with_its_noise_drawn_ahead(monkeypatch, digits, tmp_path):
    """DP-SGD (logistic regression, an MLP) and noisy GD: the same records and results, bit for bit."""
    specs = [
        parse_spec(sigma_spec(epochs=1, noise_multiplier=1.0)),
        parse_spec(sigma_spec(epochs=1, noise_multiplier=1.0, model="mlp", hidden=[16])),
        parse_spec(noisy_gd_spec(blobs_dataset(tmp_path), noise_multiplier=5.0, count_epsilon=0.05, epochs=5)),
    ]
    runs: dict[str, list] = {"ahead": [], "inline": []}
    inline: list[str] = []  # the steps built with the inline noise stage
    for mode in runs:
        if mode == "inline":
            for module in (dpsgd, noisy_gd):  # the builders of the steps that draw noise ahead
                monkeypatch.setattr(module, "drawn_ahead", lambda *args, name=module.__name__: inline.append(name))
        for spec in specs:
            records: list = []
            data = digits if spec.dataset == "digits" else None
            result = train(spec, plan=plan_spec(spec), dataset=data, on_step=records.append)
            metrics = [{k: v for k, v in r.metrics().items() if k != "elapsed_s"} for r in records]
            runs[mode].append((result.test_loss, result.test_accuracy, metrics))
    assert runs["ahead"] == runs["inline"]
    assert inline == [dpsgd.__name__, dpsgd.__name__, noisy_gd.__name__]  # every inline run drew its noise inline

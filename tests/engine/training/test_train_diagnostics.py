"""The per-step private diagnostics: gradient-norm quantiles and accuracy on the lot, checked against a
plain per-example loop, and present in the records of a training run."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.training import parse_spec, train
from engine.training.algorithms.dpsgd import clip_and_accumulate, quantile_positions, stats_of
from engine.training.clipping import BookKeepingClipper, MaterializedClipper
from engine.training.config.plan import plan_run
from engine.training.datasets import Dataset
from engine.training.models.architectures import build_model
from tests.helpers import fast_spec

QUANTILES = [0.1, 0.5, 0.9]


def loop_norms_and_correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, int]:
    """Each example's gradient norm (all parameters) by its own backward pass, and the examples whose
    logits rank the true class first."""
    params = [p for p in model.parameters() if p.requires_grad]
    norms, correct = [], 0
    for xi, yi in zip(x, y, strict=True):
        logits = model(xi.unsqueeze(0))
        grads = torch.autograd.grad(F.cross_entropy(logits, yi.unsqueeze(0)), params)
        norms.append(float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads))))
        correct += int(logits.argmax(dim=1).item() == yi.item())
    return np.array(norms), correct


def tiny_data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=generator) * torch.linspace(0.2, 3.0, 12)  # norms that vary
    return x, torch.randint(0, 4, (n,), generator=generator)


class GroupNormMlp(nn.Module):
    """Has a GroupNorm with affine parameters: the book-keeping clipper refuses it, torch.func takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 8), nn.GroupNorm(2, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@pytest.mark.parametrize("clipper_kind", ["bookkeeping", "materialized"])
@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_quantiles_and_accuracy_match_a_per_example_loop(clipper_kind, n):
    torch.manual_seed(n)
    if clipper_kind == "bookkeeping":
        model = build_model("mlp", n_features=12, n_classes=4, hidden=(16,), image_shape=None)
        clipper = BookKeepingClipper(model)
    else:
        model = GroupNormMlp()
        clipper = MaterializedClipper(model)
    x, y = tiny_data(n, seed=n)
    norms, correct = loop_norms_and_correct(model, x, y)
    clip_norm = float(np.median(norms))  # about half the lot is clipped

    stats = stats_of(clipper.clipped_sum(x, y, clip_norm), n)

    expected = np.quantile(norms, QUANTILES)  # numpy's default: linear interpolation
    got = [stats.grad_norm_p10, stats.grad_norm_p50, stats.grad_norm_p90]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert stats.correct == correct
    assert stats.clipped_fraction == pytest.approx(np.mean(norms > clip_norm * (1 + 1e-6)), abs=1.5 / n)
    assert stats.lot_size == n


def test_physical_batches_give_the_same_diagnostics_as_one_batch():
    torch.manual_seed(3)
    model = build_model("mlp", n_features=12, n_classes=4, hidden=(16,), image_shape=None)
    clipper = BookKeepingClipper(model)
    x, y = tiny_data(37, seed=3)
    whole = stats_of(clip_and_accumulate(clipper, x, y, 1.0, None), 37)
    batched = stats_of(clip_and_accumulate(clipper, x, y, 1.0, 8), 37)
    assert batched.correct == whole.correct
    for name in ("grad_norm_p10", "grad_norm_p50", "grad_norm_p90", "clipped_fraction"):
        assert getattr(batched, name) == pytest.approx(getattr(whole, name), rel=1e-5), name


def test_per_layer_clipping_reports_the_total_norm():
    torch.manual_seed(5)
    model = build_model("mlp", n_features=12, n_classes=4, hidden=(16,), image_shape=None)
    x, y = tiny_data(20, seed=5)
    norms, _ = loop_norms_and_correct(model, x, y)
    stats = stats_of(BookKeepingClipper(model).clipped_sum(x, y, (0.5, 0.5)), 20)
    np.testing.assert_allclose(
        [stats.grad_norm_p10, stats.grad_norm_p50, stats.grad_norm_p90], np.quantile(norms, QUANTILES), rtol=1e-5
    )


def test_quantile_positions_follow_linear_interpolation():
    assert quantile_positions(1) == ((0, 0, 0, 0, 0, 0), (0.0, 0.0, 0.0))
    indices, weights = quantile_positions(11)  # positions 1, 5, 9 exactly
    assert indices == (1, 2, 5, 6, 9, 10) and weights == pytest.approx((0.0, 0.0, 0.0))
    values = np.arange(11.0) ** 2
    interpolated = [
        values[lo] + (values[hi] - values[lo]) * w
        for lo, hi, w in zip(indices[::2], indices[1::2], weights, strict=True)
    ]
    np.testing.assert_allclose(interpolated, np.quantile(values, QUANTILES))


def test_an_empty_lot_has_no_diagnostics():
    model = build_model("logreg", n_features=12, n_classes=4, hidden=(), image_shape=None)
    x, y = tiny_data(0)
    stats = stats_of(BookKeepingClipper(model).clipped_sum(x, y, 1.0), 0)
    assert stats.grad_norm_p50 is None and stats.correct is None and stats.clipped_fraction is None


def records_of(raw: dict) -> list:
    records = []
    train(parse_spec(raw), on_step=records.append, device=torch.device("cpu"))
    return records


def test_dpsgd_records_carry_the_diagnostics():
    raw = fast_spec(epochs=1)
    del raw["target_epsilon"]
    records = records_of(raw | {"noise_multiplier": 1.0})  # a fixed σ skips calibration: a faster test
    steps = [r for r in records if r.step > 0 and r.lot_size]
    assert len(steps) >= 20
    for r in steps:
        assert 0.0 <= r.grad_norm_p10 <= r.grad_norm_p50 <= r.grad_norm_p90
        assert 0.0 <= r.train_accuracy <= 1.0 and 0.0 <= r.clip_fraction <= 1.0
        metrics = r.metrics()
        assert {"grad_norm_p10", "grad_norm_p50", "grad_norm_p90", "train_accuracy"} <= metrics.keys()
        if r.grad_norm_p10 > 1.0:  # C = 1: at least ~90% of the lot was clipped
            assert r.clip_fraction >= 0.8
        if r.grad_norm_p90 < 1.0:
            assert r.clip_fraction <= 0.2
    # the model learns: accuracy on the lot rises from chance over the epoch
    first, last = np.mean([r.train_accuracy for r in steps[:5]]), np.mean([r.train_accuracy for r in steps[-5:]])
    assert last > first + 0.2
    assert records[0].grad_norm_p50 is None  # step 0 is the initial evaluation, no lot


def test_noisy_gd_records_gradient_quantiles_only_with_gradient_clipping():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    data = Dataset(name="digits", x_train=x[:200], y_train=y[:200], x_test=x[200:], y_test=y[200:], n_classes=2)
    raw = {
        "dataset": "adult",
        "model": "logreg",
        "algorithm": "noisy_gd",
        "noise_multiplier": 2.0,
        "delta": 1e-6,
        "clip_norm": 1.0,
        "epochs": 3,
        "lr": 1.0,
        "seed": 0,
    }
    for clipping, has_norms in (("gradient", True), ("input", False)):
        spec = parse_spec(raw | {"clipping": clipping})
        records: list = []
        train(spec, dataset=data, plan=plan_run(spec, n_train=200), on_step=records.append, device=torch.device("cpu"))
        last = records[-1]
        assert (last.grad_norm_p50 is not None) is has_norms, clipping
        if has_norms:
            assert 0.0 < last.grad_norm_p10 <= last.grad_norm_p50 <= last.grad_norm_p90
            assert last.train_accuracy is not None
        else:
            assert last.train_accuracy is None and last.clip_fraction is None

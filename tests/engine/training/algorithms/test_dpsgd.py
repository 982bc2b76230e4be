"""The DP-SGD stages do what the privacy analysis assumes.

Statistical tests use fixed seeds (so they are reproducible) and thresholds with a stated
false-failure rate: the probability that a correct implementation fails on a fresh seed.
"""

import numpy as np
import pytest
import torch
from scipy import stats

from engine.privacy.planning import steps_for
from engine.training.algorithms.dpsgd import dpsgd_step
from engine.training.clipping import BookKeepingClipper
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.models.architectures import build_model
from engine.training.noise import add_gaussian_noise, sample_poisson_lot

ALPHA = 1e-6  # false-failure rate of each statistical test below


def test_lot_size_is_binomial():
    n, q, lots = 1000, 0.05, 4000
    generator = torch.Generator().manual_seed(123)
    sizes = np.array([len(sample_poisson_lot(n, q, generator, torch.device("cpu"))) for _ in range(lots)])
    # Chi-square goodness of fit to Binomial(n, q), tails merged so every expected count is >= 5.
    edges = np.arange(int(stats.binom.ppf(0.01, n, q)), int(stats.binom.isf(0.01, n, q)) + 1)
    observed = [np.sum(sizes < edges[0])] + [np.sum(sizes == k) for k in edges] + [np.sum(sizes > edges[-1])]
    probs = [stats.binom.cdf(edges[0] - 1, n, q), *list(stats.binom.pmf(edges, n, q))]
    probs.append(1 - sum(probs))
    expected = np.array(probs) * lots
    assert expected.min() >= 5
    _, p_value = stats.chisquare(observed, expected)
    assert p_value > ALPHA, f"lot sizes are not Binomial({n}, {q}): p = {p_value:.2e}"


def test_every_example_joins_with_probability_q():
    n, q, lots = 200, 0.1, 3000
    generator = torch.Generator().manual_seed(7)
    counts = np.zeros(n)
    for _ in range(lots):
        counts[sample_poisson_lot(n, q, generator, torch.device("cpu")).numpy()] += 1
    # Each count is Binomial(lots, q); their standardized squares sum to ~ chi-square(n).
    z = (counts - lots * q) / np.sqrt(lots * q * (1 - q))
    assert stats.chi2.sf(np.sum(z**2), n) > ALPHA
    assert len(np.unique(sample_poisson_lot(n, q, generator, torch.device("cpu")))) > 0


def test_noise_stage_has_the_stated_standard_deviation():
    std = 2.5
    generator = torch.Generator().manual_seed(11)
    noisy = add_gaussian_noise([torch.zeros(200_000, dtype=torch.float64)], std, generator)[0].numpy()
    assert_normal_with_std(noisy, std)


def assert_normal_with_std(sample: np.ndarray, std: float) -> None:
    n = sample.size
    statistic = (n - 1) * sample.var(ddof=1) / std**2  # ~ chi-square(n - 1)
    assert stats.chi2.ppf(ALPHA / 2, n - 1) < statistic < stats.chi2.isf(ALPHA / 2, n - 1), (
        f"sample std {sample.std():.4f}, expected {std}"
    )
    assert abs(sample.mean()) < stats.norm.isf(ALPHA / 2) * std / np.sqrt(n)


def make_plan(**overrides) -> TrainingPlan:
    values = dict(
        algorithm=Algorithm.DPSGD,
        n_train=40,
        lot_size=40,
        noise_multiplier=1.3,
        clip_norm=0.7,
        steps=10,
        delta=1e-5,
        noise_phases=((1.0, 10),),
        clipping="flat",
    )
    values.update(overrides)
    return TrainingPlan(**values)


def test_step_is_clipped_sum_plus_noise_over_expected_lot_size():
    torch.manual_seed(0)
    model = build_model("mlp", n_features=6, n_classes=3, hidden=(5,)).double()
    x, y = torch.randn(40, 6, dtype=torch.float64), torch.randint(0, 3, (40,))
    plan = make_plan()  # q = 1: every example is in the lot
    clipper = BookKeepingClipper(model)
    before = [p.detach().clone() for p in clipper.params]
    expected_sum = clipper.clipped_sum(x, y, plan.clip_norm).grads
    noise_generator = torch.Generator().manual_seed(5)
    replay = torch.Generator().manual_seed(5)
    noise = add_gaussian_noise([torch.zeros_like(g) for g in expected_sum], plan.noise_std, replay)
    lr = 0.3
    stats_ = dpsgd_step(
        step=1,
        clipper=clipper,
        optimizer=torch.optim.SGD(clipper.params, lr=lr),
        x=x,
        y=y,
        plan=plan,
        physical_batch_size=None,
        sampling_generator=torch.Generator().manual_seed(1),
        noise_generator=noise_generator,
    )
    assert stats_.lot_size == 40
    for p, p0, g, z in zip(clipper.params, before, expected_sum, noise, strict=True):
        torch.testing.assert_close(p.detach(), p0 - lr * (g + z) / plan.lot_size, rtol=1e-12, atol=1e-12)


def test_update_of_an_empty_lot_is_pure_noise_with_std_sigma_c_over_l():
    torch.manual_seed(0)
    model = build_model("logreg", n_features=400, n_classes=10).double()
    clipper = BookKeepingClipper(model)
    for p in clipper.params:
        torch.nn.init.zeros_(p)
    # q = 1e-9 over 3 rows: the lot is empty except with probability 3e-9.
    plan = make_plan(n_train=10**9, lot_size=1, noise_multiplier=2.0, clip_norm=3.0)
    stats_ = dpsgd_step(
        step=1,
        clipper=clipper,
        optimizer=torch.optim.SGD(clipper.params, lr=1.0),
        physical_batch_size=None,
        x=torch.randn(3, 400, dtype=torch.float64),
        y=torch.zeros(3, dtype=torch.long),
        plan=plan,
        sampling_generator=torch.Generator().manual_seed(2),
        noise_generator=torch.Generator().manual_seed(3),
    )
    assert stats_.lot_size == 0
    update = torch.cat([p.detach().flatten() for p in clipper.params]).numpy()
    assert_normal_with_std(-update, plan.noise_std / plan.lot_size)


@pytest.mark.parametrize(("epochs", "n", "lot", "steps"), [(20, 1438, 64, 450), (1, 100, 10, 10), (0.5, 100, 30, 2)])
def test_steps_for_epochs(epochs, n, lot, steps):
    assert steps_for(epochs=epochs, n_train=n, lot_size=lot) == steps


def test_parallel_noise_chunks_are_independent_and_reproducible():
    n = 400_000  # drawn in parallel chunks on a multi-core CPU

    def draw(seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return add_gaussian_noise([torch.zeros(n, dtype=torch.float64)], 1.0, generator)[0]

    first, again = draw(21), draw(21)
    assert torch.equal(first, again)
    threads = torch.get_num_threads()
    try:  # the same draws whatever the number of threads (another machine, OMP_NUM_THREADS, a Ray task)
        for count in (1, 3):
            torch.set_num_threads(count)
            assert torch.equal(draw(21), first), f"the noise changed with {count} thread(s)"
    finally:
        torch.set_num_threads(threads)
    assert_normal_with_std(first.numpy(), 1.0)
    halves = first.numpy().reshape(2, -1)  # the chunks, when there are two: their draws must not repeat
    r = np.corrcoef(halves)[0, 1]
    assert abs(r) < stats.norm.isf(ALPHA / 2) / np.sqrt(halves.shape[1])

"""DP-SGD with augmentation multiplicity (De et al. 2022, §3.1): each physical batch is augmented just before
clipping, each example's gradient the mean of its K copies'. The step is the clipped sum of the augmented lot plus
the same noise, whatever the physical batch size; without copies (K = 1, identity) it is the plain step bit for bit.
The augmentation here is a test-local one (random shifts by torch.roll, one draw per copy from its own stream)."""

import random

import pytest
import torch

from engine.training.algorithms.dpsgd import dpsgd_step
from engine.training.clipping import make_clipper
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.models.architectures import build_model
from engine.training.noise import add_gaussian_noise
from tests.engine.training.clipping.test_multiplicity import ResidualNormNet


class RandomShifts:
    """K copies of each (2, 6, 6) image, each rolled by a random (dy, dx) in [−2, 2]²; a draw per copy, in row
    order, so the copies of an example do not depend on how the lot is split into physical batches."""

    def __init__(self, multiplicity: int, seed: int):
        self.multiplicity = multiplicity
        self.rng = random.Random(seed)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        images = x.view(-1, 2, 6, 6)
        copies = [
            torch.roll(image, shifts=(self.rng.randint(-2, 2), self.rng.randint(-2, 2)), dims=(1, 2))
            for image in images
            for _ in range(self.multiplicity)
        ]
        return torch.stack(copies).reshape(len(x) * self.multiplicity, -1)


class Identity:
    multiplicity = 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


def plan(n: int) -> TrainingPlan:
    return TrainingPlan(
        algorithm=Algorithm.DPSGD,
        n_train=n,
        lot_size=n,  # q = 1: every example is in the lot, in order
        noise_multiplier=1.1,
        clip_norm=0.5,
        steps=5,
        delta=1e-5,
        noise_phases=((1.0, 5),),
        clipping="flat",
    )


def step(model, x, y, *, physical_batch_size, augmentation, lr=0.2):
    clipper = make_clipper(model)
    stats = dpsgd_step(
        step=1,
        clipper=clipper,
        optimizer=torch.optim.SGD(clipper.params, lr=lr),
        x=x,
        y=y,
        plan=plan(len(x)),
        physical_batch_size=physical_batch_size,
        sampling_generator=torch.Generator().manual_seed(1),
        noise_generator=torch.Generator().manual_seed(2),
        augmentation=augmentation,
    )
    return [p.detach().clone() for p in clipper.params], stats


def fresh(model_seed: int, make=ResidualNormNet):
    torch.manual_seed(model_seed)
    return make().double()


@pytest.mark.parametrize("physical_batch_size", [2, 7, None])
def test_a_step_with_copies_is_the_clipped_sum_of_the_augmented_lot_plus_noise(physical_batch_size):
    """Physical batches of max(1, 7 // 3) = 2 and max(1, 2 // 3) = 1 examples give the unbatched step's update."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(11, 72, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 3, (11,), generator=generator)
    model = fresh(0)
    before = [p.detach().clone() for p in model.parameters()]
    clipper = make_clipper(model)
    expected_sum = clipper.clipped_sum(
        RandomShifts(3, seed=9)(x), y.repeat_interleave(3), plan(11).clip_norm, multiplicity=3
    )
    noise = add_gaussian_noise(
        [torch.zeros_like(g) for g in expected_sum.grads], plan(11).noise_std, torch.Generator().manual_seed(2)
    )
    after, stats = step(model, x, y, physical_batch_size=physical_batch_size, augmentation=RandomShifts(3, seed=9))
    assert stats.lot_size == 11
    assert stats.loss_sum == pytest.approx(float(expected_sum.loss_sum), rel=1e-12)
    assert stats.clipped_fraction == pytest.approx(float(expected_sum.clipped.double().mean()))
    for p, p0, g, z in zip(after, before, expected_sum.grads, noise, strict=True):
        torch.testing.assert_close(p, p0 - 0.2 * (g + z) / 11, rtol=1e-10, atol=1e-12)
    unaugmented, _ = step(fresh(0), x, y, physical_batch_size=physical_batch_size, augmentation=None)
    assert not all(torch.allclose(a, b) for a, b in zip(after, unaugmented, strict=True))  # the copies counted


@pytest.mark.parametrize("physical_batch_size", [4, None])
def test_without_copies_the_step_is_the_plain_one_bit_for_bit(physical_batch_size):
    """No augmentation, or one copy per example that is the example itself: the same parameters, exactly."""
    generator = torch.Generator().manual_seed(4)
    x, y = torch.randn(10, 784, generator=generator), torch.randint(0, 3, (10,), generator=generator)

    def cnn():
        return build_model("cnn", n_features=784, n_classes=3, image_shape=(1, 28, 28))

    torch.manual_seed(5)
    plain, plain_stats = step(cnn(), x, y, physical_batch_size=physical_batch_size, augmentation=None)
    torch.manual_seed(5)
    same, same_stats = step(cnn(), x, y, physical_batch_size=physical_batch_size, augmentation=Identity())
    assert all(torch.equal(a, b) for a, b in zip(plain, same, strict=True))
    assert plain_stats == same_stats

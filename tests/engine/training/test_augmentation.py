"""Augmentation multiplicity's transforms (`engine.training.augmentation`): K random crops (and flips where the
dataset's classes allow) of each image, example-major, from the run's own seeded stream, crops inside the padded
image; digits never flipped, Fashion-MNIST and CIFAR-10 flipped."""

import pytest
import torch
import torch.nn.functional as F

from engine.training import parse_spec
from engine.training.augmentation import Augmentation, crop_padding, spec_augmentation
from engine.training.datasets import DATASETS
from engine.training.noise import random_streams
from tests.helpers import fast_spec


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def distinct_images(n: int, shape) -> torch.Tensor:
    """n images whose pixels are all distinct numbers (so a crop's source position can be read off it)."""
    c, h, w = shape
    return torch.arange(n * c * h * w, dtype=torch.float32).reshape(n, c * h * w)


def all_crops(image: torch.Tensor, shape, pad: int, *, flips: bool) -> list[torch.Tensor]:
    """Every crop (and its mirror, if `flips`) of one flattened image after reflect padding."""
    c, h, w = shape
    padded = F.pad(image.view(1, c, h, w), (pad, pad, pad, pad), mode="reflect")[0]
    crops = []
    for top in range(2 * pad + 1):
        for left in range(2 * pad + 1):
            crop = padded[:, top : top + h, left : left + w]
            crops.append(crop.reshape(-1))
            if flips:
                crops.append(crop.flip(-1).reshape(-1))
    return crops


def test_the_padding_rule_follows_the_image_side():
    assert crop_padding((3, 32, 32)) == 4  # De et al. 2022 on CIFAR-10
    assert crop_padding((1, 28, 28)) == 2
    assert crop_padding((1, 8, 8)) == 1


def test_copies_are_example_major_and_each_a_crop_of_its_own_example():
    shape = (2, 8, 8)
    x = distinct_images(5, shape)
    out = Augmentation(multiplicity=3, image_shape=shape, flip=True, source=generator())(x)
    assert out.shape == (15, 2 * 8 * 8)
    for i in range(5):
        crops = all_crops(x[i], shape, 1, flips=True)
        for copy in out[3 * i : 3 * i + 3]:
            assert any(torch.equal(copy, crop) for crop in crops), f"row of example {i} is no crop of it"


def test_crops_stay_inside_the_padded_image():
    shape = (1, 28, 28)
    x = distinct_images(3, shape)
    out = Augmentation(multiplicity=64, image_shape=shape, flip=False, source=generator(1))(x)
    crops = [all_crops(x[i], shape, 2, flips=False) for i in range(3)]
    offsets = set()
    for row, copy in enumerate(out):
        matches = [k for k, crop in enumerate(crops[row // 64]) if torch.equal(copy, crop)]
        assert len(matches) == 1
        offsets.add(matches[0])
    assert len(offsets) > 10, "the offsets should vary over the 5×5 positions"


def test_the_same_seed_repeats_the_copies_and_another_seed_does_not():
    shape = (3, 32, 32)
    x = torch.rand(4, 3 * 32 * 32, generator=generator(9))

    def copies(seed: int) -> torch.Tensor:
        return Augmentation(multiplicity=4, image_shape=shape, flip=True, source=generator(seed))(x)

    assert torch.equal(copies(0), copies(0))
    assert not torch.equal(copies(0), copies(1))


def test_an_empty_batch_gives_no_copies_and_a_wrong_width_is_refused():
    augmentation = Augmentation(multiplicity=4, image_shape=(1, 8, 8), flip=False, source=generator())
    assert augmentation(torch.zeros(0, 64)).shape == (0, 64)
    with pytest.raises(ValueError, match="flattened images"):
        augmentation(torch.zeros(2, 63))


def left_heavy_image(shape) -> torch.Tensor:
    """An image bright on its left third only: its mirror is bright on the right, which no crop of it is."""
    c, h, w = shape
    image = torch.zeros(c, h, w)
    image[:, :, : w // 3] = 1.0
    return image.reshape(1, -1)


def flipped_count(out: torch.Tensor, shape) -> int:
    c, h, w = shape
    images = out.view(-1, c, h, w)
    left, right = images[..., : w // 2].sum(dim=(1, 2, 3)), images[..., w - w // 2 :].sum(dim=(1, 2, 3))
    return int((right > left).sum())


@pytest.mark.parametrize("name", ["digits", "mnist"])
def test_digits_are_never_flipped(name):
    assert DATASETS[name].flip_invariant is False
    spec = parse_spec(fast_spec(dataset=name, augmentation_multiplicity=64, delta=1e-6))
    shape = DATASETS[name].image_shape
    augmentation = spec_augmentation(spec, shape, random_streams(spec, torch.device("cpu")))
    assert augmentation.multiplicity == 64 and not augmentation.flip
    assert flipped_count(augmentation(left_heavy_image(shape).repeat(4, 1)), shape) == 0


@pytest.mark.parametrize("name", ["fashion-mnist", "cifar10"])
def test_clothes_and_objects_are_flipped(name):
    spec = parse_spec(fast_spec(dataset=name, augmentation_multiplicity=64, delta=1e-6))
    shape = DATASETS[name].image_shape
    augmentation = spec_augmentation(spec, shape, random_streams(spec, torch.device("cpu")))
    assert augmentation.flip
    flipped = flipped_count(augmentation(left_heavy_image(shape)), shape)
    assert 0 < flipped < 64  # P(no flip among 64 copies) = 2⁻⁶⁴, and as unlikely all flipped


def test_multiplicity_one_makes_no_augmentation():
    spec = parse_spec(fast_spec())
    assert spec_augmentation(spec, (1, 8, 8), random_streams(spec, torch.device("cpu"))) is None


def test_a_lab_run_repeats_its_augmentation_and_another_seed_draws_others():
    x = torch.rand(6, 64, generator=generator(2))

    def copies(seed: int) -> torch.Tensor:
        spec = parse_spec(fast_spec(augmentation_multiplicity=4, seed=seed))
        return spec_augmentation(spec, (1, 8, 8), random_streams(spec, torch.device("cpu")))(x)

    assert torch.equal(copies(0), copies(0))
    assert not torch.equal(copies(0), copies(1))

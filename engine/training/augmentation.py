"""Augmentation multiplicity (De et al. 2022, §3.1): each example of a lot is replaced by K randomly transformed
copies of itself; DP-SGD averages the K copies' gradients before clipping (`dpsgd_step(augmentation=...)`), so
one example still moves the clipped sum by at most C and the privacy analysis, the ledger and every ε are those of
the run without it. The transforms are data-independent and public; what they buy is a less noisy signal per
example at the same noise.

The transforms, as De et al. use on CIFAR-10: a random crop of the image after reflect padding, and a random
left-right flip where the dataset's classes are flip-invariant (`DatasetInfo.flip_invariant`: Fashion-MNIST and
CIFAR-10; not digits, where a mirrored 2 is no 2). The padding is a fixed rule of the image side
(`crop_padding`): 4 pixels for a side of 32 or more (De et al.'s CIFAR-10), 2 for a side of 16 or more (28×28
MNIST-likes: a shift of up to 2 keeps the digit or garment in frame), 1 below (8×8 digits). All K copies are
random transforms, none is the original image (as De et al.; the identity is only one of the possible draws).

The draws come from the run's "augmentation" stream (`engine.training.noise`): public randomness, but seeded from
the spec in the lab mode so the run repeats exactly. One call draws every copy's offsets and flip at once and
gathers the crops from the padded batch's windows (`unfold`, a view) by advanced indexing: no loop over examples.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.training.config.spec import RunSpec, spec_dataset_info
from engine.training.datasets.base import ImageShape
from engine.training.noise import RandomSource, as_stream


def crop_padding(image_shape: ImageShape) -> int:
    """Reflect padding before the random crop: 4 pixels for images of side ≥ 32 (De et al. 2022 on CIFAR-10),
    2 for side ≥ 16 (28×28 MNIST and Fashion-MNIST), 1 for smaller images (8×8 digits)."""
    side = min(image_shape[1], image_shape[2])
    return 4 if side >= 32 else 2 if side >= 16 else 1


class Augmentation:
    """K random crops (and flips, if `flip`) of each image of a batch of flattened C-H-W images.

    `augmentation(x)` maps (n, C·H·W) to (n·K, C·H·W), example-major: rows i·K … i·K+K−1 are example i's copies."""

    def __init__(self, *, multiplicity: int, image_shape: ImageShape, flip: bool, source: RandomSource):
        if multiplicity < 1:
            raise ValueError(f"multiplicity must be ≥ 1, got {multiplicity}")
        self.multiplicity = int(multiplicity)
        self.image_shape = tuple(image_shape)
        self.flip = flip
        self.padding = crop_padding(self.image_shape)
        self.source = as_stream(source)

    def __call__(self, x: Tensor) -> Tensor:
        channels, height, width = self.image_shape
        n, k, pad = len(x), self.multiplicity, self.padding
        if x.ndim != 2 or x.shape[1] != channels * height * width:
            raise ValueError(f"expected (n, {channels * height * width}) flattened images, got {tuple(x.shape)}")
        if n == 0:
            return x.new_empty((0, x.shape[1]))
        generator = self.source.generator()
        copies = n * k
        top = torch.randint(0, 2 * pad + 1, (copies,), generator=generator, device=x.device)
        left = torch.randint(0, 2 * pad + 1, (copies,), generator=generator, device=x.device)
        flipped = torch.rand(copies, generator=generator, device=x.device) < 0.5 if self.flip else None
        padded = F.pad(x.reshape(n, channels, height, width), (pad, pad, pad, pad), mode="reflect")
        windows = padded.unfold(2, height, 1).unfold(3, width, 1)  # a view: (n, C, 2p+1, 2p+1, H, W)
        example = torch.arange(n, device=x.device).repeat_interleave(k)
        crops = windows.permute(0, 2, 3, 1, 4, 5)[example, top, left]  # (n·K, C, H, W), one copy each
        if flipped is not None:
            crops[flipped] = crops[flipped].flip(-1)
        return crops.reshape(copies, channels * height * width)


def spec_augmentation(spec: RunSpec, image_shape: ImageShape | None, streams) -> Augmentation | None:
    """The run's augmentation (None when its multiplicity is 1: the plain run), drawing from its "augmentation"
    stream; flips as its dataset allows."""
    if spec.augmentation_multiplicity <= 1:
        return None
    return Augmentation(
        multiplicity=spec.augmentation_multiplicity,
        image_shape=image_shape,
        flip=spec_dataset_info(spec).flip_invariant,
        source=streams["augmentation"],
    )


__all__ = ["Augmentation", "crop_padding", "spec_augmentation"]

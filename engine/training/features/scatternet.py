"""ScatterNet features (Tramèr & Boneh 2021, "Differentially Private Learning Needs Better Features"):
a fixed wavelet scattering transform (kymatio's Scattering2D, J = 2, L = 8 angles) followed by a
per-example group normalization. Neither step has parameters learned from data, and each image is
transformed on its own, so the features cost no privacy; a linear model on them is trained with
DP-SGD as usual. On 28×28 grey images the output has 81 channels × 7 × 7 = 3,969 features.

The transform is slow on a CPU (minutes for 70,000 images), so the features of a whole dataset are
kept under the data home, keyed by the dataset, its split sizes and the transform's settings.
"""

import hashlib
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

J = 2
ANGLES = 8
CHANNELS_PER_COLOUR = 1 + J * ANGLES + ANGLES**2 * J * (J - 1) // 2  # 81: orders 0, 1 and 2
GROUPS = 27  # 81 scattering channels per colour channel, in groups of 3 (Tramèr & Boneh's GroupNorm)
BATCH = 1024
VERSION = 1


def scattering_shape(image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    c, h, w = image_shape
    return c * CHANNELS_PER_COLOUR, h // 2**J, w // 2**J


def supports(image_shape: tuple[int, int, int] | None) -> bool:
    return image_shape is not None and image_shape[1] >= 2 ** (J + 2) and image_shape[2] >= 2 ** (J + 2)


def _scattering(image_shape: tuple[int, int, int], device: torch.device):
    # The 2-D frontend directly: `kymatio.torch` also imports the 3-D transform, which needs a
    # scipy function removed in scipy 1.15.
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    return ScatteringTorch2D(J=J, shape=image_shape[1:], L=ANGLES).to(device)


def scatter(x: np.ndarray, image_shape: tuple[int, int, int], device: torch.device | None = None) -> np.ndarray:
    """(N, C·H·W) images → (N, features) group-normalized scattering coefficients, float32."""
    device = device or torch.device("cpu")
    transform = _scattering(image_shape, device)
    channels, h, w = scattering_shape(image_shape)
    groups = math.gcd(GROUPS * image_shape[0], channels)
    out = np.empty((len(x), channels * h * w), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(x), BATCH):
            images = torch.as_tensor(x[start : start + BATCH], device=device).reshape(-1, *image_shape)
            coefficients = transform(images).reshape(len(images), channels, h, w)
            normalized = F.group_norm(coefficients, groups)  # per example: no statistic across examples
            out[start : start + len(images)] = normalized.reshape(len(images), -1).cpu().numpy()
    return out


def cached_scatter(
    x: np.ndarray, image_shape: tuple[int, int, int], *, key: str, cache_dir: Path | None, device=None
) -> np.ndarray:
    """`scatter`, memoized on disk under `cache_dir` (skipped when None) by `key` and the settings."""
    if cache_dir is None:
        return scatter(x, image_shape, device)
    tag = hashlib.sha256(f"{key}|{x.shape}|{image_shape}|J{J}|L{ANGLES}|G{GROUPS}|v{VERSION}".encode()).hexdigest()
    path = Path(cache_dir) / "features" / f"scatternet-{tag[:16]}.npy"
    if path.is_file():
        cached = np.load(path, allow_pickle=False)
        if cached.shape[0] == len(x):
            return cached
    features = scatter(x, image_shape, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part.npy")
    np.save(partial, features, allow_pickle=False)
    partial.replace(path)  # atomic: a killed run never leaves a half-written cache entry
    return features

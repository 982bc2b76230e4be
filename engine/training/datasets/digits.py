"""scikit-learn's 8×8 handwritten digits: offline, no download."""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.training.datasets.base import Dataset

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 20_260_101  # a public constant: the split does not depend on the data
DIGITS_IMAGE_SHAPE = (1, 8, 8)


def load_digits(data_dirs: Sequence[Path] = ()) -> Dataset:
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x = (bunch.data / 16.0).astype(np.float32)  # pixel values are 0..16 by construction
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(x))
    n_test = round(len(x) * DIGITS_TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return Dataset(
        name="digits",
        x_train=x[train],
        y_train=y[train],
        x_test=x[test],
        y_test=y[test],
        n_classes=10,
        image_shape=DIGITS_IMAGE_SHAPE,
    )

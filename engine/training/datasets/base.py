"""What every loader returns (`Dataset`) and what the registry knows without reading any data (`DatasetInfo`)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.training.datasets.files import RemoteFile

ImageShape = tuple[int, int, int]  # (channels, height, width); features hold the pixels flattened in C-H-W order


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """float32 features (N, n_features) and int64 labels in [0, n_classes), split into train and test."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    image_shape: ImageShape | None = None

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """Public facts about a dataset, known without reading it."""

    name: str
    title: str
    n_train: int
    n_test: int
    n_classes: int
    n_features: int
    description: str  # one line
    source: str  # the canonical URL or citation
    load: Callable[[Sequence[Path]], Dataset]
    image_shape: ImageShape | None = None
    files: tuple[RemoteFile, ...] = ()  # what `load` reads from the data directories; () when built in
    # an image and its left-right mirror show the same class (clothes, objects; not digits): augmentation may flip
    flip_invariant: bool = False

    def missing_files(self, data_dirs: Sequence[Path]) -> list[str]:
        """The relative paths of `files` found in no data directory (looked up only: `load` verifies each
        file's SHA-256 and downloads the missing ones when it may)."""
        return [f.relpath for f in self.files if not any((Path(d) / f.relpath).is_file() for d in data_dirs)]

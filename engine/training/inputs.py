"""The inputs a run's model sees, prepared from its dataset: pixels or ScatterNet features, (DP-)PCA projections,
noisy GD's constant feature (the trainer's and the stacked trainer's first stage)."""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from engine.training.algorithms.noisy_gd import with_constant_feature
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset, load_dataset
from engine.training.features import scatternet
from engine.training.features.pca import normalize_rows, pca_projection, project
from engine.training.noise import RandomSource


def load_spec_dataset(spec: RunSpec, data_dirs: Sequence[Path]) -> Dataset:
    return load_dataset(spec.dataset, data_dirs, schema=spec.schema)  # a CSV schema is validated there


def input_arrays(spec: RunSpec, data: Dataset, *, cache_dir: Path | None, device) -> tuple[np.ndarray, np.ndarray]:
    """Pixels, or fixed ScatterNet features of them (data-independent, per example: no privacy cost)."""
    if spec.features != "scatternet":
        return data.x_train, data.x_test
    return tuple(
        scatternet.cached_scatter(x, data.image_shape, key=f"{data.name}|{split}", cache_dir=cache_dir, device=device)
        for split, x in (("train", data.x_train), ("test", data.x_test))
    )


def features(
    spec: RunSpec, plan: TrainingPlan, x_train: torch.Tensor, x_test: torch.Tensor, generator: RandomSource
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs the model sees: as loaded, or (with pca_dims) projected by
    (DP-)PCA fitted on the training inputs (private: charged up front by the plan's ledger); noisy GD
    appends the constant feature 1 that carries its intercept."""
    if spec.pca_dims is not None:
        noise = plan.pca_noise if plan.private else None
        projection = pca_projection(normalize_rows(x_train), spec.pca_dims, noise_multiplier=noise, generator=generator)
        x_train, x_test = project(x_train, projection), project(x_test, projection)
    if spec.algorithm == Algorithm.NOISY_GD:
        x_train, x_test = with_constant_feature(x_train), with_constant_feature(x_test)
    return x_train, x_test


__all__ = ["features", "input_arrays", "load_spec_dataset"]

"""The trainable coordinates a spec's model has, counted from the spec on torch's meta device (what `parse_spec`
checks gradient canaries against), equal `sum(p.numel())` over the parameters the worker trains: the model built
for real on the inputs it sees (pixels, ScatterNet features of a real image, or PCA dimensions)."""

import functools
import itertools

import numpy as np
import pytest
import torch

from engine.training import SpecError, parse_spec
from engine.training.config.reach import spec_coordinates
from engine.training.config.spec import spec_dataset_info
from engine.training.datasets import DATASETS
from engine.training.features import scatternet
from engine.training.run_setup import build_run_model
from tests.helpers import fast_spec

COMBINATIONS = list(
    itertools.product(DATASETS, ("logreg", "mlp", "cnn"), ("pixels", "scatternet"), (None, 7), ((128,), (5, 3)))
)


@functools.cache
def scattered_width(image_shape: tuple[int, int, int]) -> int:
    """The width of the ScatterNet features of one real (blank) image."""
    return scatternet.scatter(np.zeros((1, int(np.prod(image_shape))), np.float32), image_shape).shape[1]


def seen_features(spec, info) -> int:
    """How many inputs the worker's model gets, from the worker's own feature code."""
    if spec.pca_dims is not None:
        return spec.pca_dims
    if spec.features == "scatternet":
        return scattered_width(tuple(info.image_shape))
    return info.n_features


def test_every_model_dataset_and_features_counts_what_the_worker_trains():
    checked = 0
    for dataset, model, features, pca_dims, hidden in COMBINATIONS:
        if model != "mlp" and hidden != (128,):
            continue
        extra = {"pca_dims": pca_dims, "pca_noise": 7.0} if pca_dims else {}
        extra |= {"hidden": list(hidden)} if model == "mlp" else {}
        raw = fast_spec(dataset=dataset, model=model, features=features, lot_size=256, delta=1e-6, **extra)
        try:
            spec = parse_spec(raw)
        except SpecError:
            continue  # a combination the engine refuses (ScatterNet without images, the CNN on tabular data…)
        info = spec_dataset_info(spec)
        torch.manual_seed(0)
        built = build_run_model(
            spec, n_features=seen_features(spec, info), n_classes=info.n_classes, image_shape=info.image_shape
        )
        trained = sum(p.numel() for p in built.parameters() if p.requires_grad)
        assert spec_coordinates(spec, info) == trained, (dataset, model, features, pca_dims, hidden)
        checked += 1
    assert checked >= 25, checked


@pytest.mark.parametrize(("hidden", "expected"), [((4,), 310), ((1,), 85), ((128,), 9610), ((5, 3), 325 + 18 + 40)])
def test_the_mlp_count_in_closed_form(hidden, expected):
    spec = parse_spec(fast_spec(model="mlp", hidden=list(hidden)))
    assert spec_coordinates(spec, spec_dataset_info(spec)) == expected

"""Datasets as float32 features and int64 labels: the registry, and `csv:PATH` uploads with a declared schema.

Preprocessing never looks at the private data: features are scaled by fixed public bounds (pixel
range, published census ranges, the bounds a user declares) and categories are one-hot encoded
with published or declared category lists. Files are read from the directories given by the
caller (the `DPLAB_DATA_DIR` copy first, then the data home) and verified by SHA-256 before use.
Image datasets keep their pixels flattened in C-H-W order; `image_shape` gives (C, H, W).
"""

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.privacy.limits import brief
from engine.training.datasets.adult import (
    ADULT_BASE_URL,
    ADULT_CATEGORIES,
    ADULT_COLUMNS,
    ADULT_FILES,
    ADULT_N_FEATURES,
    ADULT_NUMERIC_BOUNDS,
    ADULT_POSITIVE,
    load_adult,
    parse_adult,
)
from engine.training.datasets.base import Dataset, DatasetInfo, ImageShape
from engine.training.datasets.cifar import (
    CIFAR10_CLASSES,
    CIFAR10_FILE,
    CIFAR10_IMAGE_SHAPE,
    SafeUnpickler,
    load_cifar10,
    parse_cifar_archive,
    safe_unpickle,
)
from engine.training.datasets.csv_suggestion import (
    RARE_LEVEL_ROWS,
    CsvSuggestion,
    csv_schema_suggestion,
    infer_csv_schema,
)
from engine.training.datasets.digits import DIGITS_IMAGE_SHAPE, DIGITS_SPLIT_SEED, DIGITS_TEST_FRACTION, load_digits
from engine.training.datasets.files import DatasetError, RemoteFile, file_sha256, find_file, verify_checksum
from engine.training.datasets.idx import (
    IDX_IMAGE_SHAPE,
    IDX_MAGIC,
    IDX_SHA256,
    IDX_SOURCES,
    idx_file,
    load_fashion_mnist,
    load_idx_dataset,
    load_mnist,
    parse_idx,
)
from engine.training.datasets.tabular_csv import (
    CSV_PREFIX,
    CSV_SPLIT_SEED,
    MAX_CSV_BYTES,
    CsvSchema,
    CsvSchemaError,
    csv_dataset_info,
    load_csv,
    parse_csv_schema,
)

DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo(
        name="digits",
        title="Digits (8×8, built-in)",
        n_train=1438,
        n_test=359,
        n_classes=10,
        n_features=64,
        image_shape=DIGITS_IMAGE_SHAPE,
        description="scikit-learn's 1,797 handwritten 8×8 digits; offline, no download.",
        source="scikit-learn load_digits: UCI Optical Recognition of Handwritten Digits, "
        "https://archive.ics.uci.edu/dataset/80",
        load=load_digits,
    ),
    "adult": DatasetInfo(
        name="adult",
        title="UCI Adult (census income)",
        n_train=32_561,
        n_test=16_281,
        n_classes=2,
        n_features=ADULT_N_FEATURES,
        description="Predict income > $50K from 14 census attributes (UCI, CC BY 4.0).",
        source="Becker, Kohavi (1996), UCI Machine Learning Repository, https://archive.ics.uci.edu/dataset/2/adult",
        load=load_adult,
        files=tuple(ADULT_FILES.values()),
    ),
    "mnist": DatasetInfo(
        name="mnist",
        title="MNIST (28×28 digits)",
        n_train=60_000,
        n_test=10_000,
        n_classes=10,
        n_features=784,
        image_shape=IDX_IMAGE_SHAPE,
        description="LeCun, Cortes, Burges: 70,000 handwritten digits (CC BY-SA 3.0).",
        source="http://yann.lecun.com/exdb/mnist/",
        load=load_mnist,
        files=tuple(idx_file("mnist", filename) for filename in IDX_SHA256["mnist"]),
    ),
    "fashion-mnist": DatasetInfo(
        name="fashion-mnist",
        title="Fashion-MNIST (28×28 clothing)",
        n_train=60_000,
        n_test=10_000,
        n_classes=10,
        n_features=784,
        image_shape=IDX_IMAGE_SHAPE,
        description="Zalando Research: 70,000 images of 10 clothing classes (MIT).",
        source="Xiao, Rasul, Vollgraf (2017), arXiv:1708.07747, https://github.com/zalandoresearch/fashion-mnist",
        load=load_fashion_mnist,
        flip_invariant=True,
        files=tuple(idx_file("fashion-mnist", filename) for filename in IDX_SHA256["fashion-mnist"]),
    ),
    "cifar10": DatasetInfo(
        name="cifar10",
        title="CIFAR-10 (32×32 colour)",
        n_train=50_000,
        n_test=10_000,
        n_classes=10,
        n_features=3072,
        image_shape=CIFAR10_IMAGE_SHAPE,
        description="Krizhevsky: 60,000 32×32 colour images of 10 object classes (animals and vehicles).",
        source="Krizhevsky (2009), Learning Multiple Layers of Features from Tiny Images, "
        "https://www.cs.toronto.edu/~kriz/cifar.html",
        load=load_cifar10,
        flip_invariant=True,
        files=(CIFAR10_FILE,),
    ),
}


def register_dataset(info: DatasetInfo) -> DatasetInfo:
    """Add a dataset (after those already registered): the Train, Plan, Sweep and Data pages and
    `python -m engine datasets` list it. Its name must not be taken, nor start with the upload prefix."""
    if info.name in DATASETS or is_csv_name(info.name):
        raise DatasetError(f"a dataset cannot be registered as {brief(info.name)}: taken, or an upload's prefix")
    DATASETS[info.name] = info
    return info


def unregister_dataset(name: str) -> None:
    """Remove a dataset (a test's throwaway one); an unknown name does nothing."""
    DATASETS.pop(name, None)


CSV_ENTRY: dict[str, Any] = {
    "name": CSV_PREFIX + "PATH",
    "title": "Your CSV upload",
    "description": "A UTF-8 CSV with a header row, encoded with the schema you declare (target, classes, columns).",
    "source": "your upload",
    "n_train": None,
    "n_test": None,
    "n_classes": None,
    "n_features": None,
    "image_shape": None,
}


def is_csv_name(name: str) -> bool:
    return name.startswith(CSV_PREFIX)


def _csv_schema(name: str, schema: CsvSchema | Mapping[str, Any] | None) -> CsvSchema:
    if schema is None:
        raise DatasetError(f"{name}: a CSV upload needs a schema (target, classes, numeric and categorical columns)")
    return schema if isinstance(schema, CsvSchema) else parse_csv_schema(schema)


def dataset_info(name: str, schema: CsvSchema | Mapping[str, Any] | None = None) -> DatasetInfo:
    """A registered dataset's facts, or, for `csv:PATH`, the upload's (reads its header and counts rows).

    A raw schema mapping is validated with `parse_csv_schema` (CsvSchemaError if invalid).
    """
    if is_csv_name(name):
        path = name[len(CSV_PREFIX) :]
        if not path:
            raise DatasetError(f"{brief(name)}: give the CSV file's path after {CSV_PREFIX!r}")
        return dataclasses.replace(csv_dataset_info(path, _csv_schema(name, schema)), name=name)
    if schema is not None:
        raise DatasetError(f"{brief(name)}: a schema applies only to {CSV_PREFIX}PATH uploads")
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(
            f"unknown dataset {brief(name)}; available: {', '.join(DATASETS)}, or {CSV_PREFIX}PATH with a schema"
        ) from None


def load_dataset(
    name: str, data_dirs: Sequence[Path] = (), schema: CsvSchema | Mapping[str, Any] | None = None
) -> Dataset:
    info = dataset_info(name, schema)
    data = info.load(data_dirs)
    if len(data.x_train) != info.n_train or len(data.x_test) != info.n_test:
        raise DatasetError(
            f"{name}: expected {info.n_train}/{info.n_test} train/test rows, "
            f"read {len(data.x_train)}/{len(data.x_test)}"
        )
    if data.n_features != info.n_features or data.image_shape != info.image_shape:
        raise DatasetError(
            f"{name}: expected {info.n_features} features (image shape {info.image_shape}), "
            f"read {data.n_features} (image shape {data.image_shape})"
        )
    return dataclasses.replace(data, name=name) if data.name != name else data


def describe_datasets() -> list[dict[str, Any]]:
    """One JSON-able dict per registered dataset, then one for the `csv:PATH` form."""
    entries = [
        {
            "name": info.name,
            "title": info.title,
            "description": info.description,
            "source": info.source,
            "n_train": info.n_train,
            "n_test": info.n_test,
            "n_classes": info.n_classes,
            "n_features": info.n_features,
            "image_shape": list(info.image_shape) if info.image_shape else None,
        }
        for info in DATASETS.values()
    ]
    return [*entries, dict(CSV_ENTRY)]


__all__ = [
    "ADULT_BASE_URL",
    "ADULT_CATEGORIES",
    "ADULT_COLUMNS",
    "ADULT_FILES",
    "ADULT_NUMERIC_BOUNDS",
    "ADULT_N_FEATURES",
    "ADULT_POSITIVE",
    "CIFAR10_CLASSES",
    "CIFAR10_FILE",
    "CIFAR10_IMAGE_SHAPE",
    "CSV_PREFIX",
    "CSV_SPLIT_SEED",
    "DATASETS",
    "DIGITS_IMAGE_SHAPE",
    "DIGITS_SPLIT_SEED",
    "DIGITS_TEST_FRACTION",
    "IDX_IMAGE_SHAPE",
    "IDX_MAGIC",
    "IDX_SHA256",
    "IDX_SOURCES",
    "MAX_CSV_BYTES",
    "RARE_LEVEL_ROWS",
    "CsvSchema",
    "CsvSchemaError",
    "CsvSuggestion",
    "Dataset",
    "DatasetError",
    "DatasetInfo",
    "ImageShape",
    "RemoteFile",
    "SafeUnpickler",
    "csv_dataset_info",
    "csv_schema_suggestion",
    "dataset_info",
    "describe_datasets",
    "file_sha256",
    "find_file",
    "idx_file",
    "infer_csv_schema",
    "is_csv_name",
    "load_adult",
    "load_cifar10",
    "load_csv",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_idx_dataset",
    "load_mnist",
    "parse_adult",
    "parse_cifar_archive",
    "parse_csv_schema",
    "parse_idx",
    "register_dataset",
    "safe_unpickle",
    "unregister_dataset",
    "verify_checksum",
]

"""MNIST and Fashion-MNIST: gzipped IDX files (LeCun's format), 28×28 grey images."""

import gzip
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.training.datasets.base import Dataset
from engine.training.datasets.files import DatasetError, RemoteFile, find_file

IDX_SOURCES = {
    "mnist": ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
    "fashion-mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
}
IDX_SHA256 = {  # the canonical files (see ../shared/datasets/README.md)
    "mnist": {
        "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    },
}
IDX_MAGIC = {1: 2049, 3: 2051}  # unsigned-byte label vectors and image tensors
IDX_IMAGE_SHAPE = (1, 28, 28)


def idx_file(name: str, filename: str) -> RemoteFile:
    return RemoteFile(
        relpath=f"{name}/{filename}",
        sha256=IDX_SHA256[name][filename],
        urls=tuple(base + filename for base in IDX_SOURCES[name]),
    )


def parse_idx(path: Path, *, ndim: int) -> np.ndarray:
    """A gzipped IDX file of unsigned bytes (LeCun's format): big-endian magic, sizes, then data."""
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise DatasetError(f"{path}: not a readable gzip file ({exc})") from exc
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{path}: truncated IDX header ({len(raw)} bytes)")
    magic, *sizes = struct.unpack(f">{1 + ndim}I", raw[:header])
    if magic != IDX_MAGIC[ndim]:
        raise DatasetError(f"{path}: IDX magic {magic}, expected {IDX_MAGIC[ndim]} for a {ndim}-D file")
    expected = int(np.prod(sizes))
    if len(raw) - header != expected:
        raise DatasetError(f"{path}: truncated or padded: {len(raw) - header} data bytes, expected {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(sizes)


def load_idx_dataset(name: str, data_dirs: Sequence[Path]) -> Dataset:
    """28×28 grey images flattened to 784 features scaled by the public pixel bound 255."""
    arrays = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = parse_idx(find_file(idx_file(name, f"{prefix}-images-idx3-ubyte.gz"), data_dirs), ndim=3)
        labels = parse_idx(find_file(idx_file(name, f"{prefix}-labels-idx1-ubyte.gz"), data_dirs), ndim=1)
        if len(images) != len(labels):
            raise DatasetError(f"{name} {split}: {len(images)} images but {len(labels)} labels")
        if images.shape[1:] != IDX_IMAGE_SHAPE[1:]:
            raise DatasetError(f"{name} {split}: images are {images.shape[1:]}, expected {IDX_IMAGE_SHAPE[1:]}")
        pixels = np.divide(images.reshape(len(images), -1), np.float32(255), dtype=np.float32)  # one pass, no copy
        arrays[split] = (pixels, labels.astype(np.int64))
    (x_train, y_train), (x_test, y_test) = arrays["train"], arrays["test"]
    return Dataset(
        name=name,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        n_classes=10,
        image_shape=IDX_IMAGE_SHAPE,
    )


def load_mnist(data_dirs: Sequence[Path]) -> Dataset:
    return load_idx_dataset("mnist", data_dirs)


def load_fashion_mnist(data_dirs: Sequence[Path]) -> Dataset:
    return load_idx_dataset("fashion-mnist", data_dirs)

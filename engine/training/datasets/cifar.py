"""CIFAR-10: 32×32 colour images in 10 classes, from the canonical `cifar-10-python.tar.gz`.

The archive holds Python pickles. They are never read with plain `pickle.load`: `SafeUnpickler`
only resolves the few globals that rebuild a numpy array, so a crafted file cannot run code.
Pixels are scaled by the public bound 255 (no data-derived mean or standard deviation).
"""

import gzip
import io
import pickle
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.training.datasets.base import Dataset
from engine.training.datasets.files import DatasetError, RemoteFile, find_file

CIFAR10_FILE = RemoteFile(
    relpath="cifar10/cifar-10-python.tar.gz",
    sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",  # md5 c58f30108f718f92721af3b95e74349a
    urls=("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
)
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_IMAGE_SHAPE = (3, 32, 32)  # each row holds the red, then the green, then the blue 32×32 plane
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR10_MAX_MEMBER_BYTES = 64 << 20  # a canonical batch is about 31 MB


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """What protocol-2 pickles call to rebuild a bytes object; no other codec is allowed."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with codec {encoding!r} is not allowed")
    return text.encode("latin1")


try:
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy < 2
    from numpy.core.multiarray import _reconstruct

# The only globals a pickled uint8 array needs; numpy 1 writes numpy.core, numpy 2 writes numpy._core.
SAFE_PICKLE_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class SafeUnpickler(pickle.Unpickler):
    """Unpickles only plain containers, numbers, strings and numpy arrays; any other global raises DatasetError."""

    def __init__(self, file: io.BufferedIOBase, *, source: str) -> None:
        super().__init__(file, encoding="bytes")  # the canonical batches were written by Python 2
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_PICKLE_GLOBALS:
            return SAFE_PICKLE_GLOBALS[(module, name)]
        raise DatasetError(f"{self.source}: the pickle refers to {module}.{name}, which is not allowed in a dataset")


def safe_unpickle(data: bytes, *, source: str) -> Any:
    """Unpickle `data` with `SafeUnpickler`; every failure is a DatasetError naming `source`."""
    try:
        return SafeUnpickler(io.BytesIO(data), source=source).load()
    except DatasetError:
        raise
    except Exception as exc:  # a malformed pickle can raise nearly anything from the unpickler or numpy
        raise DatasetError(f"{source}: not a readable pickle ({type(exc).__name__}: {exc})") from exc


def _read_members(path: Path, wanted: set[str]) -> dict[str, bytes]:
    """The wanted members' bytes, in one streaming pass over the archive (nothing is written to disk)."""
    found: dict[str, bytes] = {}
    try:
        with gzip.open(path, "rb") as stream, tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                if member.name not in wanted:
                    continue
                where = f"{path}: member {member.name}"
                if member.name in found:
                    raise DatasetError(f"{where} appears twice")
                if not member.isfile():
                    raise DatasetError(f"{where} is not a regular file")
                if member.size > CIFAR10_MAX_MEMBER_BYTES:
                    raise DatasetError(f"{where} has {member.size} bytes, more than {CIFAR10_MAX_MEMBER_BYTES}")
                handle = archive.extractfile(member)
                data = handle.read() if handle is not None else b""
                if len(data) != member.size:
                    raise DatasetError(f"{where} is truncated ({len(data)} of {member.size} bytes)")
                found[member.name] = data
            while stream.read(1 << 20):  # read to the gzip trailer, whose CRC and length cover the whole file
                pass
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        kind = type(exc).__name__
        raise DatasetError(f"{path}: not a readable gzip-compressed tar archive, or truncated ({kind}: {exc})") from exc
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read as a gzip-compressed tar archive ({exc})") from exc
    missing = sorted(wanted - found.keys())
    if missing:
        raise DatasetError(f"{path}: member {missing[0]} is missing from the archive")
    return found


def _field(batch: dict, key: str) -> Any:
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    return None


def parse_cifar_batch(data: bytes, *, source: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch → (uint8 pixels (N, 3072) in C-H-W order, int64 labels in 0..9)."""
    batch = safe_unpickle(data, source=source)
    if not isinstance(batch, dict):
        raise DatasetError(f"{source}: expected a pickled dict, got {type(batch).__name__}")
    pixels, labels = _field(batch, "data"), _field(batch, "labels")
    if pixels is None or labels is None:
        raise DatasetError(f"{source}: the batch has no {'data' if pixels is None else 'labels'} entry")
    width = int(np.prod(CIFAR10_IMAGE_SHAPE))
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 or pixels.shape[1] != width:
        shape = getattr(pixels, "shape", None)
        raise DatasetError(
            f"{source}: data has the wrong shape or type {shape} {getattr(pixels, 'dtype', '')}, "
            f"expected uint8 (N, {width})"
        )
    if not isinstance(labels, list | np.ndarray) or len(labels) != len(pixels):
        raise DatasetError(
            f"{source}: expected a list of {len(pixels)} labels, got {type(labels).__name__} "
            f"of length {len(labels) if hasattr(labels, '__len__') else '?'}"
        )
    if not all(isinstance(label, int | np.integer) and not isinstance(label, bool) for label in labels):
        raise DatasetError(f"{source}: labels must be integers")
    y = np.asarray(labels, dtype=np.int64).reshape(len(pixels))
    bad = (y < 0) | (y >= len(CIFAR10_CLASSES))
    if bad.any():
        raise DatasetError(f"{source}: label {int(y[bad][0])} is out of range 0..{len(CIFAR10_CLASSES) - 1}")
    return pixels, y


def parse_cifar_archive(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) from an archive in the canonical layout; the checksum is not checked.

    Features are float32 pixels / 255 in C-H-W order, flattened to 3072 columns; labels are int64.
    """
    path = Path(path)
    names = {name: f"{CIFAR10_FOLDER}/{name}" for name in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH)}
    members = _read_members(path, set(names.values()))
    parsed = {
        name: parse_cifar_batch(members.pop(member), source=f"{path}: member {member}")
        for name, member in names.items()
    }

    def features(pixels: list[np.ndarray]) -> np.ndarray:
        x = np.concatenate(pixels).astype(np.float32)
        x /= 255.0  # the public pixel bound
        return x

    x_train = features([parsed[name][0] for name in CIFAR10_TRAIN_BATCHES])
    y_train = np.concatenate([parsed[name][1] for name in CIFAR10_TRAIN_BATCHES])
    x_test = features([parsed[CIFAR10_TEST_BATCH][0]])
    return x_train, y_train, x_test, parsed[CIFAR10_TEST_BATCH][1]


def load_cifar10(data_dirs: Sequence[Path]) -> Dataset:
    x_train, y_train, x_test, y_test = parse_cifar_archive(find_file(CIFAR10_FILE, data_dirs))
    return Dataset(
        name="cifar10",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        n_classes=10,
        image_shape=CIFAR10_IMAGE_SHAPE,
    )

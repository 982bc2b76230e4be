"""Datasets: the built-in offline `digits` and UCI `adult`, as float32 features and int64 labels.

Preprocessing never looks at the private data: features are scaled by fixed public bounds (pixel
range, published census ranges) and categories are one-hot encoded with the category lists
published in `adult.names`. Files are read from the directories given by the caller (the
`DPLAB_DATA_DIR` copy first, then the data home) and verified by SHA-256 before use.
"""

import gzip
import hashlib
import struct
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class DatasetError(RuntimeError):
    """A dataset file is missing, corrupted or malformed; the message names the file."""


@dataclass(frozen=True, kw_only=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int

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
    description: str
    load: Callable[[Sequence[Path]], Dataset]


@dataclass(frozen=True, kw_only=True)
class RemoteFile:
    relpath: str
    sha256: str
    urls: tuple[str, ...]  # the canonical source first, then mirrors; every copy must match sha256


# ---------------------------------------------------------------- digits (scikit-learn, offline)

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 20_260_101  # a public constant: the split does not depend on the data


def load_digits(data_dirs: Sequence[Path] = ()) -> Dataset:
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x = (bunch.data / 16.0).astype(np.float32)  # pixel values are 0..16 by construction
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(x))
    n_test = round(len(x) * DIGITS_TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return Dataset(name="digits", x_train=x[train], y_train=y[train], x_test=x[test], y_test=y[test], n_classes=10)


# ---------------------------------------------------------------- UCI Adult

ADULT_BASE_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
ADULT_FILES = {
    "train": RemoteFile(
        relpath="adult/adult.data",
        sha256="5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
        urls=(ADULT_BASE_URL + "adult.data",),
    ),
    "test": RemoteFile(
        relpath="adult/adult.test",
        sha256="a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
        urls=(ADULT_BASE_URL + "adult.test",),
    ),
}
ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
# Category lists as published in adult.names; a missing value ('?') encodes as all zeros.
ADULT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": (
        "Private",
        "Self-emp-not-inc",
        "Self-emp-inc",
        "Federal-gov",
        "Local-gov",
        "State-gov",
        "Without-pay",
        "Never-worked",
    ),
    "education": (
        "Bachelors",
        "Some-college",
        "11th",
        "HS-grad",
        "Prof-school",
        "Assoc-acdm",
        "Assoc-voc",
        "9th",
        "7th-8th",
        "12th",
        "Masters",
        "1st-4th",
        "10th",
        "Doctorate",
        "5th-6th",
        "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse",
        "Divorced",
        "Never-married",
        "Separated",
        "Widowed",
        "Married-spouse-absent",
        "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support",
        "Craft-repair",
        "Other-service",
        "Sales",
        "Exec-managerial",
        "Prof-specialty",
        "Handlers-cleaners",
        "Machine-op-inspct",
        "Adm-clerical",
        "Farming-fishing",
        "Transport-moving",
        "Priv-house-serv",
        "Protective-serv",
        "Armed-Forces",
    ),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States",
        "Cambodia",
        "England",
        "Puerto-Rico",
        "Canada",
        "Germany",
        "Outlying-US(Guam-USVI-etc)",
        "India",
        "Japan",
        "Greece",
        "South",
        "China",
        "Cuba",
        "Iran",
        "Honduras",
        "Philippines",
        "Italy",
        "Poland",
        "Jamaica",
        "Vietnam",
        "Mexico",
        "Portugal",
        "Ireland",
        "France",
        "Dominican-Republic",
        "Laos",
        "Ecuador",
        "Taiwan",
        "Haiti",
        "Columbia",
        "Hungary",
        "Guatemala",
        "Nicaragua",
        "Scotland",
        "Thailand",
        "Yugoslavia",
        "El-Salvador",
        "Trinadad&Tobago",
        "Peru",
        "Hong",
        "Holand-Netherlands",
    ),
}
# Fixed public bounds (census coding ranges, chosen before seeing the data); values are clipped to
# them, then scaled to [0, 1]. Heavy-tailed money columns are scaled on a log1p axis.
ADULT_NUMERIC_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "age": (17.0, 90.0, False),
    "education-num": (1.0, 16.0, False),
    "capital-gain": (0.0, 99_999.0, True),
    "capital-loss": (0.0, 10_000.0, True),
    "hours-per-week": (1.0, 99.0, False),
}
ADULT_POSITIVE = ">50K"


def find_file(remote: RemoteFile, data_dirs: Sequence[Path], *, download: bool = True) -> Path:
    """Locate a verified copy of `remote` in `data_dirs`, downloading into the last one if allowed."""
    for directory in data_dirs:
        candidate = Path(directory) / remote.relpath
        if candidate.is_file():
            verify_checksum(candidate, remote.sha256)
            return candidate
    if not download or not data_dirs:
        searched = ", ".join(str(Path(d) / remote.relpath) for d in data_dirs) or "(no data directory)"
        raise DatasetError(f"{remote.relpath}: not found; looked in {searched}. Set DPLAB_DATA_DIR to a copy.")
    target = Path(data_dirs[-1]) / remote.relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    failures = []
    for url in remote.urls:  # the canonical source first, then mirrors
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
                out.write(response.read())
            verify_checksum(partial, remote.sha256)
        except (OSError, DatasetError) as exc:
            partial.unlink(missing_ok=True)
            failures.append(f"{url}: {exc}")
            continue
        partial.replace(target)  # only a verified file ever takes the final name
        return target
    raise DatasetError(
        f"{remote.relpath}: not found locally and no download succeeded ({'; '.join(failures)}). "
        "Set DPLAB_DATA_DIR to a directory holding a copy."
    )


def verify_checksum(path: Path, expected_sha256: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected_sha256:
        raise DatasetError(
            f"{path}: checksum mismatch (sha256 {digest}, expected {expected_sha256}); "
            "the file is corrupted or truncated: delete it and fetch it again"
        )


def parse_adult(path: Path, *, skip_first_line: bool) -> tuple[np.ndarray, np.ndarray]:
    """Parse one Adult file into (features, labels) with public-only preprocessing."""
    lines = path.read_text(encoding="ascii", errors="strict").splitlines()
    if skip_first_line:
        lines = lines[1:]
    rows: list[list[str]] = []
    for number, line in enumerate(lines, start=2 if skip_first_line else 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(ADULT_COLUMNS):
            raise DatasetError(f"{path}: line {number} has {len(cells)} fields, expected {len(ADULT_COLUMNS)}")
        rows.append(cells)
    if not rows:
        raise DatasetError(f"{path}: no data rows")
    col = {name: np.array([r[i] for r in rows]) for i, name in enumerate(ADULT_COLUMNS)}
    blocks = []
    for name, (low, high, log_scale) in ADULT_NUMERIC_BOUNDS.items():
        try:
            values = col[name].astype(np.float64)
        except ValueError as exc:
            raise DatasetError(f"{path}: column {name} holds a non-numeric value ({exc})") from exc
        values = np.clip(values, low, high)
        if log_scale:
            values, low, high = np.log1p(values), np.log1p(low), np.log1p(high)
        blocks.append(((values - low) / (high - low))[:, None])
    for name, categories in ADULT_CATEGORIES.items():
        blocks.append((col[name][:, None] == np.array(categories)[None, :]).astype(np.float64))
    labels = np.char.rstrip(col["income"], ".")
    bad = ~np.isin(labels, [ADULT_POSITIVE, "<=50K"])
    if bad.any():
        raise DatasetError(f"{path}: unexpected income label {str(labels[bad][0])!r}")
    return np.hstack(blocks).astype(np.float32), (labels == ADULT_POSITIVE).astype(np.int64)


def load_adult(data_dirs: Sequence[Path]) -> Dataset:
    x_train, y_train = parse_adult(find_file(ADULT_FILES["train"], data_dirs), skip_first_line=False)
    x_test, y_test = parse_adult(find_file(ADULT_FILES["test"], data_dirs), skip_first_line=True)
    return Dataset(name="adult", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, n_classes=2)


# ---------------------------------------------------------------- MNIST and Fashion-MNIST (IDX files)

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


def idx_file(name: str, filename: str) -> RemoteFile:
    return RemoteFile(relpath=f"{name}/{filename}", sha256=IDX_SHA256[name][filename],
                      urls=tuple(base + filename for base in IDX_SOURCES[name]))  # fmt: skip


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
        arrays[split] = (images.reshape(len(images), -1).astype(np.float32) / 255.0, labels.astype(np.int64))
    (x_train, y_train), (x_test, y_test) = arrays["train"], arrays["test"]
    return Dataset(name=name, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, n_classes=10)


def load_mnist(data_dirs: Sequence[Path]) -> Dataset:
    return load_idx_dataset("mnist", data_dirs)


def load_fashion_mnist(data_dirs: Sequence[Path]) -> Dataset:
    return load_idx_dataset("fashion-mnist", data_dirs)


# ---------------------------------------------------------------- registry

DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo(
        name="digits",
        title="Digits (8×8, built-in)",
        n_train=1438,
        n_test=359,
        n_classes=10,
        description="scikit-learn's 1,797 handwritten 8×8 digits; offline, no download.",
        load=load_digits,
    ),
    "adult": DatasetInfo(
        name="adult",
        title="UCI Adult (census income)",
        n_train=32_561,
        n_test=16_281,
        n_classes=2,
        description="Predict income > $50K from 14 census attributes (UCI, CC BY 4.0).",
        load=load_adult,
    ),
    "mnist": DatasetInfo(
        name="mnist", title="MNIST (28×28 digits)", n_train=60_000, n_test=10_000, n_classes=10,
        description="LeCun, Cortes, Burges: 70,000 handwritten digits (CC BY-SA 3.0).", load=load_mnist,
    ),
    "fashion-mnist": DatasetInfo(
        name="fashion-mnist", title="Fashion-MNIST (28×28 clothing)", n_train=60_000, n_test=10_000,
        n_classes=10, description="Zalando Research: 70,000 images of 10 clothing classes (MIT).",
        load=load_fashion_mnist,
    ),
}  # fmt: skip


def dataset_info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r}; available: {', '.join(DATASETS)}") from None


def load_dataset(name: str, data_dirs: Sequence[Path] = ()) -> Dataset:
    info = dataset_info(name)
    data = info.load(data_dirs)
    if len(data.x_train) != info.n_train or len(data.x_test) != info.n_test:
        raise DatasetError(
            f"{name}: expected {info.n_train}/{info.n_test} train/test rows, "
            f"read {len(data.x_train)}/{len(data.x_test)}"
        )
    return data


__all__ = ["DATASETS", "Dataset", "DatasetError", "DatasetInfo", "dataset_info", "load_dataset"]

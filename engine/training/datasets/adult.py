"""UCI Adult (census income): 14 attributes, public-only preprocessing.

Numeric columns are clipped to fixed public bounds (census coding ranges) and scaled to [0, 1];
categorical columns are one-hot encoded with the category lists published in `adult.names`.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.training.datasets.base import Dataset
from engine.training.datasets.files import DatasetError, RemoteFile, find_file

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
ADULT_N_FEATURES = len(ADULT_NUMERIC_BOUNDS) + sum(len(c) for c in ADULT_CATEGORIES.values())


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

"""Datasets: public-only preprocessing, verified files, errors that name the file and the problem."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from engine.training.datasets import (
    ADULT_CATEGORIES,
    ADULT_FILES,
    ADULT_NUMERIC_BOUNDS,
    DatasetError,
    RemoteFile,
    find_file,
    load_dataset,
    parse_adult,
)

ADULT_ROW = (
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, "
    "United-States, <=50K"
)
ADULT_WIDTH = len(ADULT_NUMERIC_BOUNDS) + sum(len(c) for c in ADULT_CATEGORIES.values())


def test_digits_is_offline_split_and_scaled():
    data = load_dataset("digits")
    assert data.x_train.shape == (1438, 64) and data.x_test.shape == (359, 64)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    assert data.x_train.min() >= 0.0 and data.x_train.max() <= 1.0
    assert set(np.unique(data.y_train)) == set(range(10))
    again = load_dataset("digits")
    np.testing.assert_array_equal(data.x_test, again.x_test)  # the split is fixed


def test_adult_from_the_shared_copy(shared_datasets):
    data = load_dataset("adult", [shared_datasets])
    assert data.x_train.shape == (32_561, ADULT_WIDTH) and data.x_test.shape == (16_281, ADULT_WIDTH)
    assert int(data.y_train.sum()) == 7_841 and int(data.y_test.sum()) == 3_846  # counts from the README
    assert data.x_train.min() >= 0.0 and data.x_train.max() <= 1.0


def test_adult_preprocessing_uses_public_bounds_only(tmp_path):
    # A row far outside the bounds is clipped; it cannot move how any other row is encoded.
    extreme = ADULT_ROW.replace("39,", "150,").replace(" 2174,", " 5000000,")
    one = tmp_path / "one.csv"
    one.write_text(ADULT_ROW + "\n")
    both = tmp_path / "both.csv"
    both.write_text(ADULT_ROW + "\n" + extreme + "\n")
    x_one, _ = parse_adult(one, skip_first_line=False)
    x_both, y_both = parse_adult(both, skip_first_line=False)
    np.testing.assert_array_equal(x_one[0], x_both[0])
    assert x_both[1, 0] == 1.0 and x_both[1, 2] == 1.0  # age and capital-gain clipped to their bounds
    assert y_both.tolist() == [0, 0]


def test_missing_category_encodes_as_zeros(tmp_path):
    path = tmp_path / "missing.csv"
    path.write_text(ADULT_ROW.replace("State-gov", "?") + "\n")
    x, _ = parse_adult(path, skip_first_line=False)
    workclass = slice(len(ADULT_NUMERIC_BOUNDS), len(ADULT_NUMERIC_BOUNDS) + len(ADULT_CATEGORIES["workclass"]))
    assert x[0, workclass].sum() == 0


def test_malformed_rows_name_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(ADULT_ROW + "\n" + "1, 2, 3\n")
    with pytest.raises(DatasetError, match=r"bad\.csv: line 2 has 3 fields, expected 15"):
        parse_adult(path, skip_first_line=False)
    path.write_text(ADULT_ROW.replace("<=50K", "rich") + "\n")
    with pytest.raises(DatasetError, match="unexpected income label 'rich'"):
        parse_adult(path, skip_first_line=False)


def write_remote(tmp_path: Path, content: bytes) -> RemoteFile:
    source = tmp_path / "origin" / "adult.data"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(content)
    return RemoteFile(relpath="adult/adult.data", sha256=hashlib.sha256(content).hexdigest(), url=source.as_uri())


def test_download_is_verified_then_kept_in_the_data_home(tmp_path):
    remote = write_remote(tmp_path, (ADULT_ROW + "\n").encode())
    home = tmp_path / "home"
    path = find_file(remote, [tmp_path / "empty", home])
    assert path == home / "adult" / "adult.data" and path.read_text().startswith("39,")
    assert find_file(remote, [home], download=False) == path  # found locally the second time


def test_wrong_checksum_is_refused_and_never_kept(tmp_path):
    remote = write_remote(tmp_path, b"tampered\n")
    bad = RemoteFile(relpath=remote.relpath, sha256="0" * 64, url=remote.url)
    home = tmp_path / "home"
    with pytest.raises(DatasetError, match="checksum mismatch"):
        find_file(bad, [home])
    assert not (home / "adult" / "adult.data").exists()


def test_truncated_local_copy_names_the_file(tmp_path):
    real = ADULT_FILES["train"]
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(ADULT_ROW + "\n")  # a truncated copy
    with pytest.raises(DatasetError, match=r"adult\.data: checksum mismatch"):
        find_file(real, [tmp_path], download=False)


def test_missing_file_says_where_it_looked(tmp_path):
    with pytest.raises(DatasetError, match="DPLAB_DATA_DIR"):
        find_file(ADULT_FILES["test"], [tmp_path], download=False)

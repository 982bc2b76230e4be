"""Datasets: public-only preprocessing, verified files, errors that name the file and the problem."""

import gzip
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from engine.training.datasets import (
    ADULT_CATEGORIES,
    ADULT_FILES,
    ADULT_NUMERIC_BOUNDS,
    DATASETS,
    IDX_MAGIC,
    DatasetError,
    RemoteFile,
    dataset_info,
    describe_datasets,
    find_file,
    load_dataset,
    parse_adult,
    parse_idx,
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
    assert int(data.y_train.sum()) == 7_841 and int(data.y_test.sum()) == 3_846  # counts from the datasets README
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
    return RemoteFile(relpath="adult/adult.data", sha256=hashlib.sha256(content).hexdigest(), urls=(source.as_uri(),))


def test_download_is_verified_then_kept_in_the_data_home(tmp_path):
    remote = write_remote(tmp_path, (ADULT_ROW + "\n").encode())
    home = tmp_path / "home"
    path = find_file(remote, [tmp_path / "empty", home])
    assert path == home / "adult" / "adult.data" and path.read_text().startswith("39,")
    assert find_file(remote, [home], download=False) == path  # found locally the second time


def test_wrong_checksum_is_refused_and_never_kept(tmp_path):
    remote = write_remote(tmp_path, b"tampered\n")
    bad = RemoteFile(relpath=remote.relpath, sha256="0" * 64, urls=remote.urls)
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


def test_download_falls_back_to_a_mirror(tmp_path):
    good = write_remote(tmp_path, (ADULT_ROW + "\n").encode())
    remote = RemoteFile(
        relpath=good.relpath, sha256=good.sha256, urls=((tmp_path / "missing" / "adult.data").as_uri(), *good.urls)
    )
    assert find_file(remote, [tmp_path / "home"]).read_text().startswith("39,")


@pytest.mark.parametrize(
    ("name", "train_counts"),
    [
        ("mnist", [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]),  # from the datasets README
        ("fashion-mnist", [6000] * 10),
    ],
)
def test_mnist_and_fashion_mnist_from_the_shared_copy(shared_datasets, name, train_counts):
    data = load_dataset(name, [shared_datasets])
    assert data.x_train.shape == (60_000, 784) and data.x_test.shape == (10_000, 784)
    assert data.image_shape == (1, 28, 28)
    assert np.bincount(data.y_train).tolist() == train_counts
    assert data.x_train.dtype == np.float32 and data.x_train.min() >= 0.0 and data.x_train.max() == 1.0


def write_idx(path: Path, magic: int, sizes: tuple[int, ...], data: bytes) -> Path:
    path.write_bytes(gzip.compress(struct.pack(f">{1 + len(sizes)}I", magic, *sizes) + data))
    return path


def test_idx_files_are_parsed_and_malformed_ones_named(tmp_path):
    images = write_idx(tmp_path / "images.gz", IDX_MAGIC[3], (2, 2, 3), bytes(range(12)))
    assert parse_idx(images, ndim=3).tolist() == [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]]
    with pytest.raises(DatasetError, match=r"images\.gz: IDX magic 2051, expected 2049"):
        parse_idx(images, ndim=1)
    short = write_idx(tmp_path / "short.gz", IDX_MAGIC[1], (10,), bytes(7))
    with pytest.raises(DatasetError, match=r"short\.gz: truncated or padded: 7 data bytes, expected 10"):
        parse_idx(short, ndim=1)
    (tmp_path / "plain.gz").write_bytes(b"not gzip")
    with pytest.raises(DatasetError, match=r"plain\.gz: not a readable gzip file"):
        parse_idx(tmp_path / "plain.gz", ndim=1)


# ---------------------------------------------------------------- registry, image shapes, descriptions


def test_image_datasets_declare_their_chw_shape():
    assert dataset_info("digits").image_shape == (1, 8, 8)
    assert dataset_info("mnist").image_shape == dataset_info("fashion-mnist").image_shape == (1, 28, 28)
    assert dataset_info("cifar10").image_shape == (3, 32, 32)
    assert dataset_info("adult").image_shape is None
    for info in DATASETS.values():
        if info.image_shape is not None:
            assert info.n_features == int(np.prod(info.image_shape))
    data = load_dataset("digits")
    assert data.image_shape == (1, 8, 8) and data.n_features == dataset_info("digits").n_features == 64


def test_describe_datasets_is_json_and_covers_the_registry_and_csv_uploads():
    entries = describe_datasets()
    assert json.loads(json.dumps(entries)) == entries
    assert [e["name"] for e in entries] == [*DATASETS, "csv:PATH"]
    keys = {"name", "title", "description", "source", "n_train", "n_test", "n_classes", "n_features", "image_shape"}
    for entry in entries:
        assert set(entry) == keys
        assert entry["source"] and entry["description"] and "\n" not in entry["description"]
    by_name = {e["name"]: e for e in entries}
    counts = ("n_train", "n_test", "n_classes", "n_features", "image_shape")
    assert [by_name["cifar10"][k] for k in counts] == [50_000, 10_000, 10, 3072, [3, 32, 32]]
    assert by_name["adult"]["n_features"] == ADULT_WIDTH and by_name["adult"]["image_shape"] is None
    assert by_name["csv:PATH"]["source"] == "your upload"


def test_registered_names_take_no_schema_and_unknown_names_are_refused():
    with pytest.raises(DatasetError, match="schema applies only to csv:PATH"):
        dataset_info("digits", schema={"target": "y"})
    with pytest.raises(DatasetError, match="unknown dataset 'nope'; available: digits, adult"):
        load_dataset("nope")
    with pytest.raises(DatasetError, match="needs a schema"):
        dataset_info("csv:/tmp/upload.csv")

"""CIFAR-10: the canonical archive layout, a restricted unpickler, errors that name the file."""

import codecs
import hashlib
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from engine.training.datasets import (
    CIFAR10_FILE,
    DatasetError,
    RemoteFile,
    dataset_info,
    find_file,
    load_dataset,
    parse_cifar_archive,
    safe_unpickle,
)
from engine.training.datasets import cifar as cifar_module

PER_BATCH = 6
BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


def batch_pickle(seed: int, n: int = PER_BATCH, overrides: dict | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    batch = {
        b"batch_label": b"training batch",
        b"labels": [int(v) for v in rng.integers(0, 10, n)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"img_%d.png" % i for i in range(n)],
    }
    batch.update(overrides or {})
    return pickle.dumps(batch, protocol=2)


def write_archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def canonical_members() -> dict[str, bytes]:
    members = {name: batch_pickle(seed) for seed, name in enumerate(BATCHES)}
    members["test_batch"] = batch_pickle(99)
    members["batches.meta"] = pickle.dumps({b"label_names": [b"airplane"] * 10, b"num_vis": 3072}, protocol=2)
    return members


def test_a_small_archive_in_the_canonical_format_is_parsed(tmp_path):
    path = write_archive(tmp_path / "cifar.tar.gz", canonical_members())
    x_train, y_train, x_test, y_test = parse_cifar_archive(path)
    assert x_train.shape == (5 * PER_BATCH, 3072) and x_test.shape == (PER_BATCH, 3072)
    assert x_train.dtype == x_test.dtype == np.float32 and y_train.dtype == y_test.dtype == np.int64
    first = pickle.loads(batch_pickle(0))
    np.testing.assert_array_equal(x_train[:PER_BATCH], first[b"data"].astype(np.float32) / 255.0)
    assert y_train[:PER_BATCH].tolist() == first[b"labels"]
    assert y_test.tolist() == pickle.loads(batch_pickle(99))[b"labels"]
    assert x_train.min() >= 0.0 and x_train.max() <= 1.0


def test_features_keep_the_red_green_blue_planes_in_chw_order(tmp_path):
    red = np.zeros((1, 3, 32, 32), dtype=np.uint8)
    red[0, 0] = 255  # a pure red image: the first 1024 values of the row
    members = canonical_members()
    members["test_batch"] = batch_pickle(1, n=1, overrides={b"data": red.reshape(1, 3072), b"labels": [3]})
    *_, x_test, y_test = parse_cifar_archive(write_archive(tmp_path / "red.tar.gz", members))
    image = x_test.reshape(1, 3, 32, 32)
    assert image[0, 0].min() == 1.0 and image[0, 1:].max() == 0.0 and y_test.tolist() == [3]


def test_python2_style_pickles_with_numpy_core_are_accepted(tmp_path):
    members = canonical_members()
    members["test_batch"] = members["test_batch"].replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert b"numpy.core.multiarray" in members["test_batch"]
    *_, y_test = parse_cifar_archive(write_archive(tmp_path / "py2.tar.gz", members))
    assert len(y_test) == PER_BATCH


def test_verified_archive_loads_as_a_dataset_and_sizes_are_checked(tmp_path, monkeypatch):
    path = write_archive(tmp_path / "cifar.tar.gz", canonical_members())
    home = tmp_path / "home"
    (home / "cifar10").mkdir(parents=True)
    path.replace(home / CIFAR10_FILE.relpath)
    digest = hashlib.sha256((home / CIFAR10_FILE.relpath).read_bytes()).hexdigest()
    monkeypatch.setattr(cifar_module, "CIFAR10_FILE", RemoteFile(relpath=CIFAR10_FILE.relpath, sha256=digest, urls=()))
    data = cifar_module.load_cifar10([home])
    assert data.image_shape == (3, 32, 32) and data.x_train.shape == (30, 3072) and data.n_classes == 10
    with pytest.raises(DatasetError, match="cifar10: expected 50000/10000 train/test rows, read 30/6"):
        load_dataset("cifar10", [home])  # the registry's public sizes are checked against what was read


def test_cifar10_is_registered_with_the_canonical_file():
    info = dataset_info("cifar10")
    assert (info.n_train, info.n_test, info.n_classes, info.n_features) == (50_000, 10_000, 10, 3072)
    assert CIFAR10_FILE.relpath == "cifar10/cifar-10-python.tar.gz"
    assert CIFAR10_FILE.urls[0] == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert CIFAR10_FILE.sha256 == "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"


def test_wrong_checksum_is_refused(tmp_path):
    write_archive(tmp_path / "cifar10.tar.gz", canonical_members())
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "cifar10.tar.gz").replace(tmp_path / CIFAR10_FILE.relpath)
    with pytest.raises(DatasetError, match=r"cifar-10-python\.tar\.gz: checksum mismatch"):
        find_file(CIFAR10_FILE, [tmp_path], download=False)


@pytest.mark.parametrize("keep", [0.002, 0.5, 0.9, 0.9995])
def test_truncated_archive_names_the_file(tmp_path, keep):
    raw = write_archive(tmp_path / "full.tar.gz", canonical_members()).read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(DatasetError, match=r"cut\.tar\.gz: .*(truncated|not a readable|cannot be read)"):
        parse_cifar_archive(cut)


def test_not_an_archive_and_missing_members_are_named(tmp_path):
    (tmp_path / "plain.tar.gz").write_bytes(b"not a gzip file at all")
    with pytest.raises(DatasetError, match=r"plain\.tar\.gz: cannot be read as a gzip-compressed tar archive"):
        parse_cifar_archive(tmp_path / "plain.tar.gz")
    members = canonical_members()
    del members["test_batch"]
    with pytest.raises(DatasetError, match=r"member cifar-10-batches-py/test_batch is missing"):
        parse_cifar_archive(write_archive(tmp_path / "partial.tar.gz", members))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({b"data": np.zeros((PER_BATCH, 3000), dtype=np.uint8)}, "wrong shape"),
        ({b"data": np.zeros((PER_BATCH, 3072), dtype=np.float64)}, "wrong shape or type"),
        ({b"labels": [0, 1, 2, 3, 4, 10]}, "label 10 is out of range 0..9"),
        ({b"labels": [0, 1, 2]}, "expected a list of 6 labels"),
        ({b"labels": [0, 1, 2, 3, 4, "5"]}, "labels must be integers"),
    ],
)
def test_malformed_batches_name_the_member(tmp_path, overrides, message):
    members = canonical_members()
    members["data_batch_3"] = batch_pickle(3, overrides=overrides)
    with pytest.raises(DatasetError, match=rf"bad\.tar\.gz: member cifar-10-batches-py/data_batch_3: .*{message}"):
        parse_cifar_archive(write_archive(tmp_path / "bad.tar.gz", members))


class RunsACommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_would_run_code_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    evil = pickle.dumps({b"data": RunsACommand(marker), b"labels": []}, protocol=2)
    with pytest.raises(DatasetError, match=r"upload: the pickle refers to posix\.system, which is not allowed"):
        safe_unpickle(evil, source="upload")
    members = canonical_members()
    members["data_batch_1"] = evil
    with pytest.raises(DatasetError, match=r"evil\.tar\.gz: member cifar-10-batches-py/data_batch_1: .*not allowed"):
        parse_cifar_archive(write_archive(tmp_path / "evil.tar.gz", members))
    assert not marker.exists()


class EncodesWith:
    def __init__(self, codec: str):
        self.codec = codec

    def __reduce__(self):
        return codecs.encode, ("abc", self.codec)


def test_other_globals_and_codecs_are_refused():
    with pytest.raises(DatasetError, match=r"builtins\.eval"):
        safe_unpickle(b"cbuiltins\neval\n(S'1+1'\ntR.", source="x")
    with pytest.raises(DatasetError, match=r"not a readable pickle .*codec 'zlib_codec'"):
        safe_unpickle(pickle.dumps(EncodesWith("zlib_codec"), protocol=2), source="x")
    with pytest.raises(DatasetError, match="x: not a readable pickle"):
        safe_unpickle(b"\x80\x02garbage", source="x")

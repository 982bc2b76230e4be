"""A worker's loaded datasets: kept between runs within a budget, preloaded without downloading, keyed so that a
changed upload is loaded again, and never written to by training (so a kept copy is what loading again gives)."""

import hashlib

import numpy as np
import pytest

from cache import RunStatus
from engine.jobs.submission import submit
from engine.jobs.workers.datasets import LoadedDatasets, dataset_bytes, preload_estimate
from engine.jobs.workers.worker import Worker
from engine.training import DATASETS, Dataset, load_dataset, parse_spec, plan_spec, train
from engine.training.trainers.stack import StackMember, train_stack
from tests.helpers import binary_spec, fast_spec, synthetic_csv, synthetic_schema

SCHEMA = synthetic_schema()


def fingerprint(data: Dataset) -> str:
    digest = hashlib.sha256()
    for array in (data.x_train, data.y_train, data.x_test, data.y_test):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def csv_spec(path, algorithm: str, **changes) -> dict:
    return binary_spec({"dataset": f"csv:{path}", "schema": SCHEMA}, algorithm, epochs=2, **changes)


def stored(raw: dict) -> dict:
    """The spec as the store holds it, which is what a worker hands `LoadedDatasets.get`."""
    return parse_spec(raw).to_dict()


@pytest.fixture
def upload(tmp_path):
    path = tmp_path / "people.csv"
    path.write_bytes(synthetic_csv(rows=300))
    return path


def test_a_dataset_is_loaded_once_and_shared_by_later_runs():
    datasets = LoadedDatasets([], budget_bytes=2**30)
    first = datasets.get(stored(fast_spec()))
    assert datasets.get(stored(fast_spec(seed=7, lot_size=32))) is first  # another run, the same arrays
    assert fingerprint(first) == fingerprint(load_dataset("digits"))
    assert datasets.kept_bytes == dataset_bytes(first)


def test_nothing_is_kept_beyond_the_budget_and_the_least_recent_goes_first(upload, tmp_path):
    digits = stored(fast_spec())
    other = tmp_path / "other.csv"
    other.write_bytes(synthetic_csv(rows=300, seed=1))
    people, others = (stored(csv_spec(p, "noisy_gd")) for p in (upload, other))
    sizes = {
        name: dataset_bytes(LoadedDatasets([], budget_bytes=2**30).get(s))
        for name, s in (("digits", digits), ("people", people), ("others", others))
    }

    none_kept = LoadedDatasets([], budget_bytes=0)
    assert none_kept.get(digits) is not none_kept.get(digits)  # loaded each time
    assert none_kept.kept_bytes == 0

    two = LoadedDatasets([], budget_bytes=sizes["digits"] + sizes["people"])
    kept_digits = two.get(digits)
    two.get(people)
    assert two.get(digits) is kept_digits  # digits is now the most recently used
    two.get(others)  # over budget: people, the least recently used, leaves
    assert two.kept_bytes <= sizes["digits"] + sizes["people"]
    assert two.get(digits) is kept_digits


def test_a_changed_upload_is_loaded_again(upload):
    datasets = LoadedDatasets([], budget_bytes=2**30)
    before = datasets.get(stored(csv_spec(upload, "noisy_gd")))
    upload.write_bytes(synthetic_csv(rows=300, seed=5))  # new content: a new data_sha256
    after = datasets.get(stored(csv_spec(upload, "noisy_gd")))
    assert after is not before and fingerprint(after) != fingerprint(before)
    assert fingerprint(after) == fingerprint(load_dataset(f"csv:{upload}", schema=SCHEMA))


def test_preloading_reads_only_datasets_whose_files_are_here(tmp_path):
    datasets = LoadedDatasets([tmp_path], budget_bytes=2**30)  # an empty data directory: nothing to read
    assert datasets.preload() == ["digits"]  # built in; MNIST and the others are neither found nor downloaded
    assert not any(tmp_path.iterdir())
    assert LoadedDatasets([tmp_path], budget_bytes=1000).preload() == []  # digits does not fit 1,000 bytes


def test_preloading_the_shared_copies_fits_the_estimate(shared_datasets):
    datasets = LoadedDatasets([shared_datasets], budget_bytes=2**30)
    loaded = datasets.preload()
    assert {"digits", "adult", "mnist", "fashion-mnist"} <= set(loaded)
    for name in loaded:
        data = datasets.get(stored(fast_spec(dataset=name))) if name == "digits" else datasets.kept[(name, None, None)]
        assert dataset_bytes(data) <= preload_estimate(DATASETS[name])


def test_training_never_writes_to_a_datasets_arrays(upload):
    """Every algorithm and option that touches the inputs (PCA, the constant feature, per-layer clipping, micro-
    batches, anisotropic noise, the textbook learners, stacks): the kept arrays are bit-identical afterwards."""
    digits = load_dataset("digits")
    people = load_dataset(f"csv:{upload}", schema=SCHEMA)
    before = {"digits": fingerprint(digits), "people": fingerprint(people)}
    digit_specs = [
        fast_spec(epochs=1),
        fast_spec(epochs=1, pca_dims=20, pca_noise=4.0),
        fast_spec(epochs=1, model="mlp", hidden=[16], clipping="per_layer", lr=0.5),
        fast_spec(epochs=1, physical_batch_size=16),
        fast_spec(epochs=1, algorithm="aniso_dpsgd"),
    ]
    for raw in digit_specs:
        train(parse_spec(raw), dataset=digits)
    for algorithm in ("noisy_gd", "nonprivate", "expmech_stumps", "sq_laplace", "rwm_online", "rwm_linear"):
        raw = csv_spec(upload, algorithm)
        if algorithm == "nonprivate":
            raw = {k: v for k, v in raw.items() if k not in ("delta", "target_epsilon", "clip_norm")} | {"lot_size": 32}
        train(parse_spec(raw), dataset=people)
    members = [parse_spec(fast_spec(epochs=1, lr=lr)) for lr in (0.5, 1.0)]
    train_stack([StackMember(spec=s, plan=plan_spec(s)) for s in members], dataset=digits)
    assert {"digits": fingerprint(digits), "people": fingerprint(people)} == before


def test_a_worker_trains_its_runs_on_the_kept_dataset(store, monkeypatch):
    loads = []
    datasets = LoadedDatasets([], budget_bytes=2**30)
    original = datasets.get

    def counted(spec):
        loads.append(spec["dataset"])
        return original(spec)

    monkeypatch.setattr(datasets, "get", counted)
    kept = datasets.get(stored(fast_spec()))
    ids = [submit(store, parse_spec(fast_spec(epochs=1, seed=seed))).run_id for seed in (1, 2)]
    worker = Worker(store, data_dirs=[], datasets=datasets)
    worker.run_forever(exit_when_idle=True)
    assert [store.get_run(i).status for i in ids] == [RunStatus.FINISHED] * 2
    assert loads == ["digits"] * 3 and datasets.kept_bytes == dataset_bytes(kept)

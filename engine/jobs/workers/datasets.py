"""A worker's loaded datasets, kept between its runs so that a run's first point does not wait for files.

Loading MNIST from its gzipped IDX files takes ~1 s on a CPU and the Adult CSVs as long; a worker that
trains one run after another would pay it before every run's first point. A worker keeps the datasets it
loaded (least recently used first out, within `DPLAB_DATASET_CACHE_MB`), and warming up loads the
registered datasets whose files are already here (never downloading), so the first run on any of them
starts at once.

Safe to share: a registered dataset's files are pinned by SHA-256 (checked when loaded) and an upload's by
the `data_sha256` its spec records, so a kept copy is exactly what loading again would give; training never
writes to a dataset's arrays (`tests/engine/jobs/workers/test_datasets.py` checks each algorithm and input option).
"""

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.training import Dataset, DatasetError, load_dataset
from engine.training.datasets import DATASETS, DatasetInfo

log = logging.getLogger("dplab.worker")


def dataset_bytes(data: Dataset) -> int:
    return sum(a.nbytes for a in (data.x_train, data.y_train, data.x_test, data.y_test))


class LoadedDatasets:
    """Datasets loaded from `data_dirs`, the most recently used kept within `budget_bytes` (0: keep none)."""

    def __init__(self, data_dirs: Sequence[Path], *, budget_bytes: int):
        self.data_dirs, self.budget_bytes = list(data_dirs), budget_bytes
        self.kept: OrderedDict[tuple, Dataset] = OrderedDict()

    def get(self, spec: Mapping[str, Any]) -> Dataset:
        """The dataset of a stored (canonical, validated) spec: kept, or loaded (and kept when it fits). The spec is
        not parsed again here: for an upload that would hash its file once more (training parses it, and refuses
        a file that changed since the spec was made)."""
        schema = spec.get("schema")
        key = dataset_key(spec["dataset"], data_sha256=spec.get("data_sha256"), schema=schema)
        if (data := self.kept.get(key)) is not None:
            self.kept.move_to_end(key)
            return data
        data = load_dataset(spec["dataset"], self.data_dirs, schema=schema)
        self.keep(key, data)
        return data

    def keep(self, key: tuple, data: Dataset) -> None:
        if dataset_bytes(data) > self.budget_bytes:
            return
        self.kept[key] = data
        while self.kept_bytes > self.budget_bytes:
            self.kept.popitem(last=False)

    @property
    def kept_bytes(self) -> int:
        return sum(dataset_bytes(d) for d in self.kept.values())

    def preload(self) -> list[str]:
        """Load the registered datasets whose files are all here (never downloading), in catalogue order, while
        they fit the budget; returns the names loaded."""
        loaded = []
        for info in DATASETS.values():
            if info.missing_files(self.data_dirs) or self.kept_bytes + preload_estimate(info) > self.budget_bytes:
                continue
            try:
                data = load_dataset(info.name, self.data_dirs)
            except (DatasetError, OSError) as exc:  # the run that needs it reports the error
                log.warning("not preloaded: %s (%s)", info.name, exc)
                continue
            self.keep(dataset_key(info.name), data)
            loaded.append(info.name)
        return loaded


def dataset_key(name: str, *, data_sha256: str | None = None, schema: dict | None = None) -> tuple:
    """A registered dataset by name; an upload by its path, the SHA-256 of its content and its schema."""
    return (name, data_sha256, json.dumps(schema, sort_keys=True) if schema is not None else None)


def preload_estimate(info: DatasetInfo) -> int:
    """float32 features and int64 labels of every row: what loading `info` would add."""
    rows = info.n_train + info.n_test
    return rows * (4 * info.n_features + 8)

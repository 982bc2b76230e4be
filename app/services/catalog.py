"""The Data page's table of datasets: what the engine knows of each, and whether its files are here.

Pure functions (no Streamlit). A registered dataset is built in (digits ships with scikit-learn), found
in a data directory (`DPLAB_DATA_DIR`, then the data home's `datasets/`), or downloaded on first use;
files are only looked up here, not verified (training verifies each file's SHA-256 before use).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.services.uploads import SavedUpload
from engine.training.datasets import DATASETS

BUILT_IN = "built-in"
DOWNLOADABLE = "downloads on first use (needs internet)"
UPLOADED = "your upload"
FOUND = "on this machine (a data directory)"


@dataclass(frozen=True, kw_only=True)
class Availability:
    where: str  # BUILT_IN, FOUND, partly found, or DOWNLOADABLE (never a server path: the page may be shared)
    bytes_on_disk: int | None  # None for a built-in dataset


def availability(name: str, data_dirs: Sequence[Path]) -> Availability:
    files = DATASETS[name].files
    if not files:
        return Availability(where=BUILT_IN, bytes_on_disk=None)
    found: dict[str, tuple[Path, Path]] = {}  # relpath → (data directory, file)
    for remote in files:
        for directory in data_dirs:
            candidate = Path(directory) / remote.relpath
            if candidate.is_file():
                found[remote.relpath] = (Path(directory), candidate)
                break
    size = sum(path.stat().st_size for _, path in found.values())
    if not found:
        return Availability(where=DOWNLOADABLE, bytes_on_disk=0)
    if len(found) < len(files):
        return Availability(
            where=f"partly found ({len(found)} of {len(files)} files); {DOWNLOADABLE}", bytes_on_disk=size
        )
    return Availability(where=FOUND, bytes_on_disk=size)


def catalog_rows(data_dirs: Sequence[Path], uploads: Sequence[SavedUpload]) -> list[dict[str, Any]]:
    """One row per registered dataset (`dataset` is what a spec names), then one per saved upload (named by its label:
    its file path says nothing to a reader)."""
    rows = []
    for info in DATASETS.values():
        here = availability(info.name, data_dirs)
        rows.append(
            _row(
                info.title,
                info.name,
                (info.n_train, info.n_test, info.n_features, info.n_classes),
                here.where,
                here.bytes_on_disk,
                info.description,
            )
        )
    for upload in uploads:
        sizes = (upload.n_train, upload.n_test, upload.n_features, upload.n_classes)
        description = f"{upload.file_name}: predict {upload.schema.get('target')!r}"
        rows.append(_row(upload.label, "your upload", sizes, UPLOADED, upload.size, description))  # not its path
    return rows


def _row(
    title: str, dataset: str, sizes: tuple[int, int, int, int], available: str, size: int | None, description: str
) -> dict[str, Any]:
    train, test, features, classes = sizes
    return {
        "title": title,
        "dataset": dataset,
        "train": train,
        "test": test,
        "features": features,
        "classes": classes,
        "available": available,
        "on disk": size_text(size),
        "description": description,
    }


def size_text(size: float | None) -> str:
    """Bytes as a reader counts them: "5.9 KB", "12.3 MB", "1.20 GB"; "–" when unknown."""
    if size is None:
        return "–"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:
            return f"{size / scale:,.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{size:,.0f} B"

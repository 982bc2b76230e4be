"""Dataset files: locate a verified copy in the data directories, or download one and verify it first."""

import hashlib
import shutil
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CHUNK_BYTES = 1 << 20


class DatasetError(RuntimeError):
    """A dataset file is missing, corrupted or malformed; the message names the file."""


@dataclass(frozen=True, kw_only=True)
class RemoteFile:
    relpath: str
    sha256: str
    urls: tuple[str, ...]  # the canonical source first, then mirrors; every copy must match sha256


def file_sha256(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                digest.update(chunk)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return digest.hexdigest()


def verify_checksum(path: Path, expected_sha256: str) -> None:
    digest = file_sha256(path)
    if digest != expected_sha256:
        raise DatasetError(
            f"{path}: checksum mismatch (sha256 {digest}, expected {expected_sha256}); "
            "the file is corrupted or truncated: delete it and fetch it again"
        )


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
                shutil.copyfileobj(response, out, CHUNK_BYTES)
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

"""Job-layer settings, read from the environment when they are used (so tests can set them):

- `DPLAB_WORKERS`: local worker processes (default: one per GPU, else 1);
- `DPLAB_HEARTBEAT_S`: seconds between a worker's heartbeats (default 2);
- `DPLAB_STALE_AFTER_S`: a running run whose heartbeat is older than this is "worker lost" (default 30);
- `DPLAB_WORKER_NICE`: how much lower a worker's CPU priority is than the dashboard's (default 10, 0 to 19), so
  the dashboard stays responsive while runs train on the same machine;
- `DPLAB_STACK_MAX`: most runs of a sweep trained together as one stack (default 8, 1 to 64); 1 turns
  stacking off;
- `DPLAB_WARMUP`: `0` makes a worker skip its warm-up (engine/jobs/workers/warmup.py) before taking runs;
- `DPLAB_DATA_DIR`: where datasets are read from before the data home's download folder.
"""

import os
from pathlib import Path

from cache import datasets_dir


class SettingError(ValueError):
    """An environment setting holds a value outside its allowed range."""


def _number(name: str, default: float, *, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(f"{name} must be a number in [{low}, {high}], got {raw!r}") from None
    if not low <= value <= high:
        raise SettingError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def heartbeat_s() -> float:
    return _number("DPLAB_HEARTBEAT_S", 2.0, low=0.05, high=600.0)


def stale_after_s() -> float:
    """Never less than three heartbeats, so a busy but live worker is not written off."""
    return max(_number("DPLAB_STALE_AFTER_S", 30.0, low=0.1, high=86_400.0), 3 * heartbeat_s())


def worker_nice() -> int:
    return int(_number("DPLAB_WORKER_NICE", 10, low=0, high=19))


def dataset_cache_bytes() -> int:
    """How much of its loaded datasets a worker keeps between runs (`DPLAB_DATASET_CACHE_MB`; 0: none)."""
    return int(_number("DPLAB_DATASET_CACHE_MB", 1024, low=0, high=1_048_576) * 2**20)


def stack_max() -> int:
    """Most members of a stack (runs trained together as one vectorized model); 1: every run alone."""
    return int(_number("DPLAB_STACK_MAX", 8, low=1, high=64))


def warm_up_enabled() -> bool:
    return os.environ.get("DPLAB_WARMUP", "1").strip().lower() not in ("0", "false", "no", "off")


def gpu_count() -> int:
    import torch  # only the pool needs it, and only to count devices

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_workers() -> int:
    return int(_number("DPLAB_WORKERS", max(gpu_count(), 1), low=1, high=256))


def default_data_dirs() -> list[Path]:
    """Where datasets are read from: `DPLAB_DATA_DIR` first, then the data home's download folder."""
    dirs = [Path(p) for p in os.environ.get("DPLAB_DATA_DIR", "").split(os.pathsep) if p]
    return [*dirs, datasets_dir()]

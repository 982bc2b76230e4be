import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cache import Store  # noqa: E402

# Workers that tests start skip the warm-up (seconds each, on the test's clock); tests/test_warmup.py runs it.
os.environ.setdefault("DPLAB_WARMUP", "0")


@pytest.fixture(autouse=True)
def _keep_main_module():
    """AppTest leaves a page script as `__main__`; multiprocessing's spawn would then run that page in
    every child it starts. Put the real `__main__` back after each test."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh data home for the test (DPLAB_HOME), so nothing touches the developer's store."""
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def store(home) -> Store:
    return Store(home / "runs.sqlite3")


@pytest.fixture
def shared_datasets() -> Path:
    """The verified dataset copies (`DPLAB_DATA_DIR`, `../shared/datasets` in CI)."""
    candidates = [Path(p) for p in os.environ.get("DPLAB_DATA_DIR", "").split(os.pathsep) if p]
    candidates.append(ROOT.parent / "shared" / "datasets")
    for candidate in candidates:
        if (candidate / "adult" / "adult.data").is_file():
            return candidate
    pytest.skip("no copy of the UCI Adult files: set DPLAB_DATA_DIR (CI uses ../shared/datasets)")


def fast_spec(**overrides) -> dict:
    """The issue's acceptance spec: digits, logistic regression, ε = 3."""
    spec = {
        "dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3.0, "delta": 1e-5,
        "clip_norm": 1.0, "lot_size": 64, "epochs": 20, "lr": 2.0, "seed": 0,
    }  # fmt: skip
    spec.update(overrides)
    return spec

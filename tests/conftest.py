import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cache import RunStatus, Store  # noqa: E402

# Workers that tests start skip the warm-up (seconds each, on the test's clock);
# tests/engine/jobs/workers/test_warmup.py runs it.
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


ARTIFACTS_KEY = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory, pytestconfig) -> Path:
    """The folder for screenshots and other files a test leaves for a person to look at: $DPLAB_TEST_ARTIFACTS if
    set, else `artifacts/` in this session's pytest temporary folder. Never the repository."""
    if configured := os.environ.get("DPLAB_TEST_ARTIFACTS"):
        path = Path(configured).resolve()
        path.mkdir(parents=True, exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("artifacts", numbered=False)
    pytestconfig.stash[ARTIFACTS_KEY] = path
    return path


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say where the screenshots went, when a test took any."""
    if (path := config.stash.get(ARTIFACTS_KEY, None)) is not None:
        terminalreporter.write_line(f"test artifacts (screenshots): {path}")


@pytest.fixture(scope="module")
def digits():
    """The digits dataset, loaded once per module (imported here: a session that needs no dataset loads no torch)."""
    from engine.training import load_dataset

    return load_dataset("digits")


@pytest.fixture(scope="module")
def trained_sweep(tmp_path_factory) -> Path:
    """A store with two finished tiny runs (trained once for each module that uses it): `TINY_SWEEP` of
    apptest_helpers, for the Sweep and Compare pages' tests (imported here: only the page tests load Streamlit)."""
    from tests.apptest_helpers import train_tiny_sweep

    path = tmp_path_factory.mktemp("trained") / "runs.sqlite3"
    store = Store(path)
    train_tiny_sweep(store)
    assert [r.status for r in store.list_runs()] == [RunStatus.FINISHED] * 2
    return path


@pytest.fixture
def trained_store(trained_sweep, home) -> Store:
    """A copy of `trained_sweep` as the test's data home's store."""
    from tests.apptest_helpers import copy_store

    return copy_store(trained_sweep, home)

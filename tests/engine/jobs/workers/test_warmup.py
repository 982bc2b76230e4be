"""A worker's warm-up: it pays the lazy imports and the first training step before the worker registers, records
nothing, and a worker that warmed up then trains its first run without paying them again."""

import json
import os
import subprocess
import sys

import pytest

from cache import RunStatus
from engine.jobs import settings
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests.helpers import ROOT, fast_spec

PROBE = """
import json, sys
from engine.jobs.workers import warmup
took = warmup.warm_up()
lazy = ("torch._dynamo", "sklearn.datasets", "dp_accounting.pld")
print(json.dumps({"took": took, "loaded": [name for name in lazy if name in sys.modules]}))
"""


@pytest.mark.slow
def test_warm_up_loads_the_lazy_modules_in_a_fresh_process():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["took"] is not None and report["took"] > 0
    assert report["loaded"] == ["torch._dynamo", "sklearn.datasets", "dp_accounting.pld"]


@pytest.mark.slow
def test_a_worker_warms_up_before_registering_and_records_nothing(home, store):
    submitted = submit(store, parse_spec(fast_spec(epochs=1))).run_id
    worker = subprocess.run(
        [sys.executable, "-m", "engine", "worker", "--once"],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "DPLAB_HOME": str(home), "DPLAB_WARMUP": "1"},
    )
    assert worker.returncode == 0, worker.stderr
    log = worker.stderr
    assert "warm-up took" in log
    assert log.index("warm-up took") < log.index("started as")
    assert "datasets loaded ahead of runs: digits" in log  # and any other whose files are here
    [run] = store.list_runs()
    assert run.id == submitted and run.status is RunStatus.FINISHED  # the warm-up run left no record
    assert run.progress_step == run.total_steps


def test_the_setting_reads_common_spellings(monkeypatch):
    for raw, expected in [("0", False), ("off", False), ("False", False), ("1", True), ("yes", True)]:
        monkeypatch.setenv("DPLAB_WARMUP", raw)
        assert settings.warm_up_enabled() is expected
    monkeypatch.delenv("DPLAB_WARMUP")
    assert settings.warm_up_enabled() is True

"""Malformed specs and command lines: each gets a one-line error naming the problem, exit status 2,
and the store is left exactly as it was (compared table by table before and after)."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from cache import RunStatus
from engine.cli import main
from tests.conftest import ROOT, fast_spec


def dump(path) -> list[str]:
    with sqlite3.connect(path) as db:
        return list(db.iterdump())


@pytest.fixture
def populated(store):
    """A store holding a finished and a queued run, so 'unchanged' means something."""
    done = store.create_run(spec=fast_spec(), cache_key="done", engine_version="t")
    store.claim_next("w")
    store.finish(done, status=RunStatus.FINISHED, result={"epsilon": 1.0, "test_accuracy": 0.9})
    store.create_run(spec=fast_spec(seed=1), cache_key="queued", engine_version="t")
    return store


def without(key: str, **overrides) -> dict:
    return {k: v for k, v in fast_spec(**overrides).items() if k != key}


CSV_SCHEMA = {"target": "income", "classes": ["<=50K", ">50K"], "numeric": {"age": [17, 90]}}
BAD_SPECS = {
    # (file content, what the error must mention)
    "empty file": ("", "empty file"),
    "only whitespace": ("  \n\t", "empty file"),
    "invalid JSON": ('{"dataset": "digits",', "not valid JSON"),
    "trailing garbage": ('{"dataset": "digits"} x', "not valid JSON"),
    "a JSON array": ("[1, 2]", "spec: must be a JSON object"),
    "a JSON string": ('"digits"', "spec: must be a JSON object"),
    "JSON null": ("null", "spec: must be a JSON object"),
    "unknown key": (fast_spec(learning_rate=0.1), "learning_rate: unknown key"),
    "missing dataset": (without("dataset"), "dataset: missing required key"),
    "dataset not a string": (fast_spec(dataset=123), "dataset: must be a string"),
    "unknown dataset": (fast_spec(dataset="nope"), "dataset: "),
    "csv file that does not exist": (fast_spec(dataset="csv:/nonexistent/x.csv", schema=CSV_SCHEMA), "dataset: "),
    "csv schema without classes": (
        fast_spec(dataset="csv:/nonexistent/x.csv", schema={"target": "y"}),
        "schema.classes: required",
    ),
    "unknown model": (fast_spec(model="resnet"), "model: must be one of"),
    "unknown algorithm": (fast_spec(algorithm="sgd"), "algorithm: must be one of"),
    "missing algorithm": (without("algorithm"), "algorithm: missing required key"),
    "epochs negative": (fast_spec(epochs=-1), "epochs: must be"),
    "epochs zero": (fast_spec(epochs=0), "epochs: must be"),
    "epochs huge": (fast_spec(epochs=1e12), "epochs: must be"),
    "epochs a string": (fast_spec(epochs="ten"), "epochs: must be"),
    "epochs a boolean": (fast_spec(epochs=True), "epochs: must be"),
    "too many steps": (fast_spec(epochs=1000, lot_size=1), "steps; at most"),
    "lr zero": (fast_spec(lr=0), "lr: must be"),
    "lr NaN": (
        '{"dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3, "delta": 1e-5,'
        ' "clip_norm": 1, "lot_size": 64, "epochs": 1, "lr": NaN, "seed": 0}',
        "lr: must be",
    ),
    "lr infinite": (fast_spec(lr=float("inf")), "lr: must be"),
    "seed fractional": (fast_spec(seed=1.5), "seed: must be"),
    "seed negative": (fast_spec(seed=-1), "seed: must be"),
    "seed huge": (fast_spec(seed=2**70), "seed: must be"),
    "lot size zero": (fast_spec(lot_size=0), "lot_size: must be"),
    "lot size above N": (fast_spec(lot_size=100_000), "lot_size: must be"),
    "lot size a string": (fast_spec(lot_size="64"), "lot_size: must be"),
    "delta zero": (fast_spec(delta=0), "delta: must be"),
    "delta one": (fast_spec(delta=1), "delta: must be"),
    "delta at least 1/N": (fast_spec(delta=0.01), "delta"),
    "clip norm negative": (fast_spec(clip_norm=-1), "clip_norm: must be"),
    "clip norm zero": (fast_spec(clip_norm=0), "clip_norm: must be"),
    "target epsilon zero": (fast_spec(target_epsilon=0), "target_epsilon: must be"),
    "target epsilon negative": (fast_spec(target_epsilon=-3), "target_epsilon: must be"),
    "both epsilon and sigma": (fast_spec(noise_multiplier=1.0), "exactly one of target_epsilon and noise_multiplier"),
    "neither epsilon nor sigma": (without("target_epsilon"), "exactly one of target_epsilon and noise_multiplier"),
    "sigma zero": (without("target_epsilon", noise_multiplier=0), "noise_multiplier: must be"),
    "sigma huge": (without("target_epsilon", noise_multiplier=1e9), "noise_multiplier: must be"),
    "hidden sizes for logreg": (fast_spec(hidden=[10]), "hidden"),
    "unknown optimizer": (fast_spec(optimizer="lbfgs"), "optimizer: must be one of"),
    "momentum without its optimizer": (fast_spec(momentum=0.9), "momentum"),
    "physical batch zero": (fast_spec(physical_batch_size=0), "physical_batch_size: must be"),
    "unknown clipping": (fast_spec(clipping="norm"), "clipping: must be one of"),
    "delta for nonprivate": (fast_spec(algorithm="nonprivate"), "does not apply to algorithm 'nonprivate'"),
    "unknown job option value": (fast_spec(on_worker_lost="retry"), "on_worker_lost: must be one of"),
    "deeply nested JSON": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
}


# `submit` for every case; `train` (which reads specs through the same function) for a sample of them
CASES = [("submit", case) for case in BAD_SPECS] + [
    ("train", case) for case in ("empty file", "invalid JSON", "unknown key", "delta at least 1/N", "lr NaN",
                                 "too many steps", "unknown job option value", "deeply nested JSON")
]  # fmt: skip


@pytest.mark.parametrize(("command", "case"), CASES)
def test_a_malformed_spec_is_refused_and_the_store_unchanged(case, command, populated, tmp_path, capsys):
    content, mentions = BAD_SPECS[case]
    path = tmp_path / "spec.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    before = dump(populated.path)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and mentions in err and err.count("\n") == 1, err
    assert dump(populated.path) == before


BAD_CALLS = {
    "no command": ([], "required: command"),
    "unknown command": (["frobnicate"], "invalid choice"),
    "spec file missing": (["submit", "/nonexistent/spec.json"], "cannot read spec"),
    "spec is a directory": (["submit", "/"], "is a directory"),
    "submit without a file": (["submit"], "required: spec"),
    "show an unknown run": (["show", "nope"], "no run with id 'nope'"),
    "cancel an unknown run": (["cancel", "nope"], "no run with id 'nope'"),
    "workers zero": (["worker", "--workers", "0"], "must be in [1, 256]"),
    "workers not a number": (["worker", "--workers", "two"], "must be an integer"),
    "workers huge": (["worker", "--workers", "100000"], "must be in [1, 256]"),
    "negative poll": (["worker", "--poll", "-1"], "must be in [0.01, 60]"),
    "unknown backend": (["worker", "--backend", "slurm"], "invalid choice"),
    "negative GPU fraction": (["worker", "--gpus-per-run", "-0.5"], "must be in [0, 8]"),
    "runs limit zero": (["runs", "--limit", "0"], "must be in [1, 1000000]"),
    "runs unknown status": (["runs", "--status", "done"], "invalid choice"),
    "epsilon with delta 2": (
        ["epsilon", "--sampling-rate", "0.01", "--steps", "10", "--delta", "2", "--noise-multiplier", "1"],
        "delta",
    ),
    "epsilon sampling rate 0": (
        ["epsilon", "--sampling-rate", "0", "--steps", "10", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--sampling-rate must be in (0, 1]",
    ),
    "calibrate without a schedule": (["calibrate", "--epsilon", "1", "--delta", "1e-5"], "give --sampling-rate"),
    "calibrate with no steps": (
        ["calibrate", "--epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0.01"],
        "give --steps",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_a_malformed_command_line_is_refused_and_the_store_unchanged(case, populated, capsys):
    argv, mentions = BAD_CALLS[case]
    before = dump(populated.path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and mentions in err, err
    assert dump(populated.path) == before


def test_cancelling_a_finished_run_is_an_error_that_changes_nothing(populated, capsys):
    [done] = populated.list_runs(statuses=[RunStatus.FINISHED])
    before = dump(populated.path)
    assert main(["cancel", done.id]) == 2
    assert "already finished" in capsys.readouterr().err
    assert dump(populated.path) == before


def test_sweep_files_are_checked_like_specs(populated, tmp_path, capsys):
    before = dump(populated.path)
    for content, mentions in (("", "empty file"), ("{", "not valid JSON"), ('{"base": {}}', "grid: must be"),
                              (json.dumps({"base": fast_spec(), "grid": {"lot_size": [32, 10**7]}}),
                               "grid point lot_size=10000000, seed=0: lot_size")):  # fmt: skip
        path = tmp_path / "grid.json"
        path.write_text(content)
        assert main(["sweep", str(path)]) == 2
        assert mentions in capsys.readouterr().err
    assert dump(populated.path) == before


def test_real_processes_exit_2_with_a_json_error_when_asked(home, tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(fast_spec(delta=1)))
    env = {**os.environ, "DPLAB_HOME": str(home), "PYTHONPATH": str(ROOT)}
    for argv in (["submit", str(path), "--json"], ["show", "nope", "--json"], ["runs", "--limit", "x", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "engine", *argv], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        error = json.loads(proc.stdout)
        assert set(error) == {"error", "kind"} and error["error"] in proc.stderr

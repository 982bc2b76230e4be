"""Malformed input of every kind the command line takes (spec files, grid specs, arguments, CSV uploads,
run archives): each case gets a one-line error naming the problem, exit status 2, and leaves the store
byte for byte as it was (a SHA-256 of its dump before and after).

Every case also runs under a hang bound (`HANG_BOUND_S`). It is no speed target: the refusals take
milliseconds, and the bound is far above that, but it fails the cases that used to hang or run away
(a FIFO blocked `open` forever, `/dev/zero` was read until memory ran out, calibrating ε = ∞ ran 40 s).
"""

import hashlib
import json
import os
import re
import sqlite3
import time
import zipfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from cache import RunStatus, Store
from engine.cli import main
from engine.jobs.transfer import export_runs
from tests.cache.store.test_maintenance import make_run
from tests.engine.jobs.test_transfer import MALFORMED as MALFORMED_ARCHIVES
from tests.engine.jobs.test_transfer import first_run, populated, rewrite_runs
from tests.helpers import cli, fast_spec, rezip, unzip

HANG_BOUND_S = 60.0

# ---------------------------------------------------------------------------------------- the store and files


def digest(path: Path) -> str:
    """A SHA-256 of every table's rows and the schema."""
    with closing(sqlite3.connect(path)) as db:
        return hashlib.sha256("\n".join(db.iterdump()).encode()).hexdigest()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A store holding finished, failed, cancelled and queued runs and a sweep (DPLAB_HOME points at it
    for the whole module), and a folder for the input files."""
    root = tmp_path_factory.mktemp("malformed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPLAB_HOME", str(root / "home"))
        store = Store(root / "home" / "runs.sqlite3")
        populated(store)
        files = root / "files"
        files.mkdir()
        yield store, files


def without(key: str, **overrides) -> dict:
    return {k: v for k, v in fast_spec(**overrides).items() if k != key}


def sigma_spec(**overrides) -> dict:
    return without("target_epsilon", **({"noise_multiplier": 1.0} | overrides))


CSV_SCHEMA = {
    "target": "income",
    "classes": ["<=50K", ">50K"],
    "numeric": {"age": [17, 90]},
    "categorical": {"sex": ["Female", "Male"]},
    "test_fraction": 0.2,
}
CSV_GOOD = ["age,sex,income", "39,Male,<=50K", "50,Female,>50K", "17,Male,<=50K", "90,Female,>50K", "28,Male,<=50K"]


def csv_spec(path: str, **overrides) -> dict:
    spec = {
        "dataset": f"csv:{path}",
        "schema": CSV_SCHEMA,
        "model": "logreg",
        "algorithm": "nonprivate",
        "lot_size": 2,
        "epochs": 1,
        "lr": 0.1,
        "seed": 0,
    }
    spec.update(overrides)
    return spec


# ---------------------------------------------------------------------------------------- spec files

SPECS: dict[str, tuple[str | dict | list | bytes, str]] = {
    # (file content: text, raw bytes or a JSON value; what the error must mention)
    "empty file": ("", "empty file"),
    "only whitespace": ("  \n\t", "empty file"),
    "invalid JSON": ('{"dataset": "digits",', "not valid JSON"),
    "trailing garbage": ('{"dataset": "digits"} x', "not valid JSON"),
    "single quotes": ("{'dataset': 'digits'}", "not valid JSON"),
    "a JSON array": ("[1, 2]", "spec: must be a JSON object"),
    "a JSON string": ('"digits"', "spec: must be a JSON object"),
    "a JSON number": ("42", "spec: must be a JSON object"),
    "JSON null": ("null", "spec: must be a JSON object"),
    "not UTF-8": (b'{"dataset": "\xff\xfe"}', "not UTF-8"),
    "UTF-16": ('{"dataset": "digits"}'.encode("utf-16"), "not UTF-8"),
    "binary garbage": (bytes(range(256)) * 4, "not UTF-8"),
    "duplicate key": ('{"dataset": "digits", "dataset": "adult"}', 'repeats the key "dataset"'),
    "duplicate nested key": (
        json.dumps(fast_spec(lr_schedule={"kind": "constant"}))[:-1] + ', "x": {"a": 1, "a": 2}}',
        'repeats the key "a"',
    ),
    "a 5,000-digit integer": ('{"seed": ' + "7" * 5000 + "}", "an integer of 5,000 digits"),
    "a 400-digit integer": ('{"lot_size": ' + "1" * 400 + "}", "an integer of 400 digits"),
    "unknown key": (fast_spec(learning_rate=0.1), "learning_rate: unknown key"),
    "a 9 MB key": ('{"' + "k" * 9_000_000 + '": 1}', "more characters"),
    "missing dataset": (without("dataset"), "dataset: missing required key"),
    "dataset not a string": (fast_spec(dataset=123), "dataset: must be a string"),
    "dataset a list": (fast_spec(dataset=["digits"]), "dataset: must be a string"),
    "unknown dataset": (fast_spec(dataset="nope"), "dataset: unknown dataset 'nope'"),
    "a 9 MB dataset name": (fast_spec(dataset="d" * 9_000_000), "more characters"),
    "csv file that does not exist": (fast_spec(dataset="csv:/nonexistent/x.csv", schema=CSV_SCHEMA), "dataset: "),
    "csv without a path": (fast_spec(dataset="csv:", schema=CSV_SCHEMA), "give the CSV file's path"),
    "csv schema without classes": (
        fast_spec(dataset="csv:/nonexistent/x.csv", schema={"target": "y"}),
        "schema.classes: required",
    ),
    "schema for a built-in dataset": (fast_spec(schema=CSV_SCHEMA), "schema: only applies to csv:PATH"),
    "unknown model": (fast_spec(model="resnet"), "model: must be one of"),
    "model not a string": (fast_spec(model={"name": "logreg"}), "model: must be a string"),
    "cnn on digits": (fast_spec(model="cnn"), "'cnn' needs images of at least 1×28×28"),
    "unknown algorithm": (fast_spec(algorithm="sgd"), "algorithm: must be one of"),
    "missing algorithm": (without("algorithm"), "algorithm: missing required key"),
    "epochs negative": (fast_spec(epochs=-1), "epochs: must be a number in (0, 1000]"),
    "epochs zero": (fast_spec(epochs=0), "epochs: must be"),
    "epochs huge": (fast_spec(epochs=1e12), "epochs: must be"),
    "epochs 1e308": (fast_spec(epochs=1e308), "epochs: must be"),
    "epochs overflowing to infinity": (json.dumps(fast_spec(epochs=7.5)).replace("7.5", "1e999"), "epochs: must be"),
    "epochs a string": (fast_spec(epochs="ten"), "epochs: must be"),
    "epochs a boolean": (fast_spec(epochs=True), "epochs: must be"),
    "epochs null": (fast_spec(epochs=None), "epochs: must be"),
    "too many steps": (fast_spec(epochs=1000, lot_size=1), "steps; at most"),
    "lr zero": (fast_spec(lr=0), "lr: must be"),
    "lr NaN": (
        '{"dataset": "digits", "model": "logreg", "algorithm": "dpsgd", "target_epsilon": 3, "delta": 1e-5,'
        ' "clip_norm": 1, "lot_size": 64, "epochs": 1, "lr": NaN, "seed": 0}',
        "lr: must be",
    ),
    "lr infinite": (fast_spec(lr=float("inf")), "lr: must be"),
    "lr negative infinity": (fast_spec(lr=float("-inf")), "lr: must be"),
    "seed fractional": (fast_spec(seed=1.5), "seed: must be an integer"),
    "seed negative": (fast_spec(seed=-1), "seed: must be"),
    "seed huge": (fast_spec(seed=2**70), "seed: must be"),
    "seed a string": (fast_spec(seed="0"), "seed: must be"),
    "lot size zero": (fast_spec(lot_size=0), "lot_size: must be"),
    "lot size above N": (fast_spec(lot_size=100_000), "lot_size: must be"),
    "lot size a string": (fast_spec(lot_size="64"), "lot_size: must be"),
    "lot size fractional": (fast_spec(lot_size=64.5), "lot_size: must be an integer"),
    "delta zero": (fast_spec(delta=0), "delta: must be"),
    "delta one": (fast_spec(delta=1), "delta: must be"),
    "delta negative": (fast_spec(delta=-1e-5), "delta: must be"),
    "delta at least 1/N": (fast_spec(delta=0.01), "delta"),
    "clip norm negative": (fast_spec(clip_norm=-1), "clip_norm: must be"),
    "clip norm zero": (fast_spec(clip_norm=0), "clip_norm: must be"),
    "clip norm 1e308": (fast_spec(clip_norm=1e308), "clip_norm: must be"),
    "target epsilon zero": (fast_spec(target_epsilon=0), "target_epsilon: must be"),
    "target epsilon negative": (fast_spec(target_epsilon=-3), "target_epsilon: must be"),
    "target epsilon infinite": (fast_spec(target_epsilon=float("inf")), "target_epsilon: must be"),
    "target epsilon 1e308": (fast_spec(target_epsilon=1e308), "target_epsilon: must be a number in [0.01, 100]"),
    "both epsilon and sigma": (fast_spec(noise_multiplier=1.0), "exactly one of target_epsilon and noise_multiplier"),
    "neither epsilon nor sigma": (without("target_epsilon"), "exactly one of target_epsilon and noise_multiplier"),
    "sigma zero": (sigma_spec(noise_multiplier=0), "noise_multiplier: must be"),
    "sigma huge": (sigma_spec(noise_multiplier=1e9), "noise_multiplier: must be"),
    "sigma 1e308": (sigma_spec(noise_multiplier=1e308), "noise_multiplier: must be a number in [0.05, 500]"),
    "hidden sizes for logreg": (fast_spec(hidden=[10]), "hidden"),
    "hidden a string": (fast_spec(model="mlp", hidden="128"), "hidden: must be a list"),
    "hidden too deep": (fast_spec(model="mlp", hidden=[8] * 5), "hidden: must be a list of 1 to 4"),
    "hidden width zero": (fast_spec(model="mlp", hidden=[0]), "hidden: must be an integer in [1, 8192]"),
    "hidden width huge": (fast_spec(model="mlp", hidden=[10**6]), "hidden: must be an integer in [1, 8192]"),
    "unknown optimizer": (fast_spec(optimizer="lbfgs"), "optimizer: must be one of"),
    "momentum without its optimizer": (fast_spec(momentum=0.9), "momentum"),
    "momentum one": (fast_spec(optimizer="momentum", momentum=1.0), "momentum: must be a number in [0, 1)"),
    "physical batch zero": (fast_spec(physical_batch_size=0), "physical_batch_size: must be"),
    "unknown clipping": (fast_spec(clipping="norm"), "clipping: must be one of"),
    "unknown features": (fast_spec(features="hog"), "features: must be one of"),
    "scatternet on digits": (fast_spec(features="scatternet"), "'scatternet' needs images"),
    "pca dims above the features": (fast_spec(pca_dims=100_000, pca_noise=4), "pca_dims: must be"),
    "pca without its noise": (fast_spec(pca_dims=10), "pca_noise: missing"),
    "pca noise without dims": (fast_spec(pca_noise=4.0), "pca_noise: only applies with pca_dims"),
    "schedule not an object": (fast_spec(lr_schedule="step"), "lr_schedule: must be an object"),
    "schedule unknown kind": (fast_spec(lr_schedule={"kind": "cosine"}), "lr_schedule.kind: must be one of"),
    "schedule kind a list": (fast_spec(lr_schedule={"kind": ["step"]}), "lr_schedule.kind: must be one of"),
    "schedule NaN factor": (
        fast_spec(lr_schedule={"kind": "step", "factor": float("nan"), "every_epochs": 5}),
        "lr_schedule.factor: must be",
    ),
    "schedule zero period": (
        fast_spec(lr_schedule={"kind": "step", "factor": 0.5, "every_epochs": 0}),
        "lr_schedule.every_epochs: must be",
    ),
    "schedule extra key": (fast_spec(lr_schedule={"kind": "constant", "x": 1}), "lr_schedule.x: unknown key"),
    "linear noise schedule": (
        fast_spec(noise_schedule={"kind": "linear", "end_factor": 0.5, "epochs": 5}),
        "noise_schedule.kind: must be one of constant, step here",
    ),
    "delta for nonprivate": (fast_spec(algorithm="nonprivate"), "does not apply to algorithm 'nonprivate'"),
    "lot size for noisy GD": (
        fast_spec(algorithm="noisy_gd", dataset="adult", delta=1e-6),
        "lot_size: does not apply to algorithm 'noisy_gd'",
    ),
    "count epsilon zero": (
        {k: v for k, v in fast_spec(algorithm="noisy_gd", count_epsilon=0).items() if k != "lot_size"},
        "count_epsilon: must be",
    ),
    "noisy GD on ten classes": (
        {k: v for k, v in fast_spec(algorithm="noisy_gd").items() if k != "lot_size"},
        "noisy_gd needs a two-class dataset",
    ),
    "aniso granularity unknown": (
        fast_spec(algorithm="aniso_dpsgd", aniso_granularity="row"),
        "aniso_granularity: must be one of",
    ),
    "aniso ratio below one": (fast_spec(algorithm="aniso_dpsgd", aniso_max_ratio=0.5), "aniso_max_ratio: must be"),
    "a learner on ten classes": (
        {"dataset": "digits", "algorithm": "expmech_stumps", "seed": 0, "delta": 1e-5, "target_epsilon": 1},
        "expmech_stumps learns two classes",
    ),
    "learner thresholds huge": (
        {
            "dataset": "adult",
            "algorithm": "expmech_stumps",
            "seed": 0,
            "delta": 1e-6,
            "target_epsilon": 1,
            "thresholds": 10**6,
        },
        "thresholds: must be an integer in [2, 256]",
    ),
    "learner fractional iterations": (
        {
            "dataset": "adult",
            "algorithm": "sq_laplace",
            "seed": 0,
            "delta": 1e-6,
            "target_epsilon": 1,
            "epochs": 2.5,
            "lr": 1,
        },
        "sq_laplace takes whole iterations",
    ),
    "unknown job option value": (fast_spec(on_worker_lost="retry"), "on_worker_lost: must be one of"),
    "job option a list": (fast_spec(on_worker_lost=["requeue"]), "on_worker_lost: must be one of"),
    "deeply nested JSON": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "over 10 MiB": (" " * (10 * 2**20 + 1), "larger than the"),
}

# `train` reads specs through the same function and refuses before touching the store: a sample
TRAIN_SAMPLE = (
    "empty file",
    "invalid JSON",
    "duplicate key",
    "a 5,000-digit integer",
    "unknown key",
    "delta at least 1/N",
    "lr NaN",
    "too many steps",
    "unknown job option value",
    "deeply nested JSON",
    "sigma 1e308",
    "csv file that does not exist",
)


def spec_file(files: Path, case: str) -> Path:
    content, _ = SPECS[case]
    path = files / f"spec-{hashlib.sha256(case.encode()).hexdigest()[:12]}.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------- CSV uploads


def csv_file(files: Path, name: str, lines: list[str] | bytes) -> Path:
    path = files / f"{name}.csv"
    if isinstance(lines, bytes):
        path.write_bytes(lines)
    else:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


CSVS: dict[str, tuple[list[str] | bytes, dict, str]] = {
    # (file lines or bytes, spec overrides, what the error must mention)
    "bad numeric cell": ([*CSV_GOOD[:3], "zz,Male,<=50K", *CSV_GOOD[3:]], {}, "line 4, column 'age': the numeric cell"),
    "empty numeric cell": ([*CSV_GOOD, ",Male,<=50K"], {}, "column 'age': the numeric cell is empty"),
    "infinite numeric cell": ([*CSV_GOOD, "inf,Male,<=50K"], {}, "not a finite number"),
    "label not a class": ([*CSV_GOOD, "40,Male,rich"], {}, "target value 'rich' is not one of the declared"),
    "ragged row": ([*CSV_GOOD, "40,Male"], {}, "has 2 fields, expected 3"),
    "not UTF-8": ("age,sex,income\n39,M\xe4le,<=50K\n".encode("latin-1"), {}, "is not valid UTF-8"),
    "empty file": (b"", {}, "the file is empty"),
    "header only": (["age,sex,income"], {}, "has a header but no data rows"),
    "duplicate header": (["age,age,income", "1,2,<=50K"], {}, "duplicate column name 'age'"),
    "missing column": (["years,sex,income", "39,Male,<=50K"], {}, "no column 'age' in the header"),
    "one row": (CSV_GOOD[:2], {}, "too few for a train and a test split"),
    "unclosed quote": ([*CSV_GOOD, '40,"Male,<=50K'], {}, "malformed CSV"),
    "a 400-digit bound": (
        CSV_GOOD,
        {"schema": CSV_SCHEMA | {"numeric": {"age": [0, 10**400]}}},
        "an integer of 401 digits",
    ),
    "a bound given as text": (
        CSV_GOOD,
        {"schema": CSV_SCHEMA | {"numeric": {"age": ["0", "90"]}}},
        "schema.numeric.age: expected [low, high]",
    ),
    "an infinite bound": (
        CSV_GOOD,
        {"schema": CSV_SCHEMA | {"numeric": {"age": [0, float("inf")]}}},
        "schema.numeric.age: expected [low, high]",
    ),
    "bounds reversed": (CSV_GOOD, {"schema": CSV_SCHEMA | {"numeric": {"age": [90, 17]}}}, "low < high"),
    "one class": (CSV_GOOD, {"schema": CSV_SCHEMA | {"classes": ["<=50K"]}}, "schema.classes: expected a list"),
    "repeated class": (CSV_GOOD, {"schema": CSV_SCHEMA | {"classes": [">50K", ">50K"]}}, "is listed twice"),
    "unknown schema key": (CSV_GOOD, {"schema": CSV_SCHEMA | {"weights": {}}}, "schema.weights: unknown key"),
    "no feature column": (
        CSV_GOOD,
        {"schema": {"target": "income", "classes": ["<=50K", ">50K"]}},
        "declare at least one feature column",
    ),
    "test fraction one": (CSV_GOOD, {"schema": CSV_SCHEMA | {"test_fraction": 1}}, "schema.test_fraction: expected"),
    "changed since the spec": (CSV_GOOD, {"data_sha256": "0" * 64}, "data_sha256: "),
}


def csv_case_file(files: Path, case: str) -> Path:
    lines, overrides, _ = CSVS[case]
    name = f"csv-{hashlib.sha256(case.encode()).hexdigest()[:12]}"
    path = csv_file(files, name, lines)
    spec = files / f"{name}.json"
    spec.write_text(json.dumps(csv_spec(str(path), **overrides)))
    return spec


# ---------------------------------------------------------------------------------------- grid specs

GRIDS: dict[str, tuple[object, str]] = {
    "grid not an object": ([1, 2], "sweep: must be a JSON object"),
    "grid unknown key": ({"base": fast_spec(), "grid": {"lr": [1]}, "repeat": 2}, "repeat: unknown key"),
    "grid name not a string": ({"base": fast_spec(), "grid": {"lr": [1]}, "name": 5}, "name: must be a string"),
    "grid name too long": ({"base": fast_spec(), "grid": {"lr": [1]}, "name": "n" * 201}, "at most 200 characters"),
    "grid vectorize not a boolean": (
        {"base": fast_spec(), "grid": {"lr": [1]}, "vectorize": "yes"},
        "vectorize: must be true or false",
    ),
    "grid without base": ({"grid": {"lr": [1]}}, "base: missing"),
    "grid base not an object": ({"base": [1], "grid": {"lr": [1]}}, "base: missing or not a JSON object"),
    "grid without grid": ({"base": fast_spec()}, "grid: must be an object of 1 to 2"),
    "grid empty": ({"base": fast_spec(), "grid": {}}, "grid: must be an object of 1 to 2"),
    "grid of three keys": ({"base": fast_spec(), "grid": {"lr": [1], "epochs": [1], "seed": [1]}}, "1 to 2 spec keys"),
    "grid over an unknown key": ({"base": fast_spec(), "grid": {"speed": [1]}}, "grid.speed: not a spec key"),
    "grid over the seed": ({"base": fast_spec(), "grid": {"seed": [1, 2]}}, "seeds go in 'seeds'"),
    "grid values not a list": ({"base": fast_spec(), "grid": {"lr": 1}}, "grid.lr: must be a list of 1 to 100"),
    "grid values empty": ({"base": fast_spec(), "grid": {"lr": []}}, "grid.lr: must be a list of 1 to 100"),
    "grid of 101 values": ({"base": fast_spec(), "grid": {"lr": list(range(1, 102))}}, "a list of 1 to 100"),
    "grid repeated value": ({"base": fast_spec(), "grid": {"lr": [1, 1]}}, "grid.lr: has a repeated value"),
    "search not an object": ({"base": fast_spec(), "grid": {"lr": [1]}, "search": 3}, "search: must be a JSON object"),
    "search with seeds": (
        {"base": fast_spec(), "grid": {"lr": [1]}, "search": {"distribution": "poisson", "mean": 2}, "seeds": [1]},
        "seeds: a private search draws",
    ),
    "search mean too large": (
        {"base": fast_spec(), "grid": {"lr": [1]}, "search": {"distribution": "logarithmic", "mean": 90}},
        "search.mean: mean 90 is too large",
    ),
    "seeds not a list": ({"base": fast_spec(), "grid": {"lr": [1]}, "seeds": 3}, "seeds: must be a list"),
    "seeds repeated": ({"base": fast_spec(), "grid": {"lr": [1]}, "seeds": [1, 1]}, "distinct integers"),
    "seeds booleans": ({"base": fast_spec(), "grid": {"lr": [1]}, "seeds": [True]}, "distinct integers"),
    "seeds of 51": ({"base": fast_spec(), "grid": {"lr": [1]}, "seeds": list(range(51))}, "1 to 50 distinct"),
    "grid of 1,001 runs": (
        {"base": fast_spec(), "grid": {"lr": list(range(1, 101)), "epochs": list(range(1, 12))}},
        "expands to 1100 runs; at most 1000",
    ),
    "grid point invalid": (
        {"base": fast_spec(), "grid": {"lot_size": [32, 10**7]}},
        "grid point lot_size=10000000, seed=0: lot_size",
    ),
    "grid points training one run": ({"base": fast_spec(), "grid": {"lr": [1, 1.0]}}, "train the same run"),
    "grid job option invalid": (
        {"base": fast_spec(), "grid": {"lr": [1]}, "on_worker_lost": "retry"},
        "on_worker_lost: must be one of",
    ),
    "grid duplicate key": ('{"base": {}, "base": {}}', 'repeats the key "base"'),
    "grid empty file": ("", "empty file"),
}


def grid_file(files: Path, case: str) -> Path:
    content, _ = GRIDS[case]
    path = files / f"grid-{hashlib.sha256(case.encode()).hexdigest()[:12]}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


# ---------------------------------------------------------------------------------------- command lines

EPSILON = ["epsilon", "--sampling-rate", "0.01", "--steps", "100", "--delta", "1e-5", "--noise-multiplier", "1"]
CALIBRATE = ["calibrate", "--sampling-rate", "0.01", "--steps", "100", "--delta", "1e-5", "--epsilon", "1"]


def words(line: str) -> list[str]:
    return line.split()


def changed(argv: list[str], option: str, value: str) -> list[str]:
    at = argv.index(option)
    return [*argv[: at + 1], value, *argv[at + 2 :]]


CALLS: dict[str, tuple[list[str], str]] = {
    "no command": ([], "required: command"),
    "unknown command": (["frobnicate"], "invalid choice"),
    "submit without a file": (["submit"], "required: spec"),
    "show an unknown run": (["show", "nope"], "no run with id 'nope'"),
    "show a 9 MB run id": (["show", "r" * 9_000_000], "more characters"),
    "cancel an unknown run": (["cancel", "nope"], "no run with id 'nope'"),
    "delete an unknown run": (["delete", "nope", "--yes"], "no run with id 'nope'"),
    "export an unknown sweep": (["export", "--sweep", "nope", "-o", "/tmp/never.zip"], "no sweep with id 'nope'"),
    "gc an unknown status": (["gc", "--status", "done"], "invalid choice"),
    "gc negative age": (["gc", "--older-than", "-1"], "older"),
    "workers zero": (["worker", "--workers", "0"], "must be an integer in [1, 256]"),
    "workers not a number": (["worker", "--workers", "two"], "must be an integer"),
    "workers huge": (["worker", "--workers", "100000"], "must be an integer in [1, 256]"),
    "negative poll": (["worker", "--poll", "-1"], "must be a number in [0.01, 60]"),
    "NaN poll": (["worker", "--poll", "nan"], "must be a number in [0.01, 60]"),
    "unknown backend": (["worker", "--backend", "slurm"], "invalid choice"),
    "negative GPU fraction": (["worker", "--gpus-per-run", "-0.5"], "must be a number in [0, 8]"),
    "runs limit zero": (["runs", "--limit", "0"], "must be an integer in [1, 1000000]"),
    "runs limit a 5,000-digit number": (["runs", "--limit", "9" * 5000], "must be an integer"),
    "runs unknown status": (["runs", "--status", "done"], "invalid choice"),
    "epsilon with delta 2": (changed(EPSILON, "--delta", "2"), "--delta: must be a number in (0, 1)"),
    "epsilon with delta NaN": (changed(EPSILON, "--delta", "nan"), "--delta: must be"),
    "epsilon sampling rate 0": (
        changed(EPSILON, "--sampling-rate", "0"),
        "--sampling-rate: must be a number in (0, 1]",
    ),
    "epsilon sampling rate NaN": (changed(EPSILON, "--sampling-rate", "nan"), "--sampling-rate: must be"),
    "epsilon sampling rate 1e308": (changed(EPSILON, "--sampling-rate", "1e308"), "--sampling-rate: must be"),
    "epsilon sigma 1e308": (changed(EPSILON, "--noise-multiplier", "1e308"), "must be a number in [0.05, 500]"),
    "epsilon sigma inf": (changed(EPSILON, "--noise-multiplier", "inf"), "--noise-multiplier: must be"),
    "epsilon sigma NaN": (changed(EPSILON, "--noise-multiplier", "nan"), "--noise-multiplier: must be"),
    "epsilon sigma negative": (changed(EPSILON, "--noise-multiplier", "-1"), "--noise-multiplier: must be"),
    "epsilon steps 1e12": (changed(EPSILON, "--steps", "1000000000000"), "must be an integer in [1, 10000000]"),
    "epsilon steps in scientific notation": (changed(EPSILON, "--steps", "1e12"), "--steps: must be an integer"),
    "epsilon steps zero": (changed(EPSILON, "--steps", "0"), "--steps: must be an integer in [1, 10000000]"),
    "epsilon epochs NaN": (
        ["epsilon", "--sampling-rate", "0.01", "--epochs", "nan", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--epochs: must be",
    ),
    "epsilon epochs inf": (
        ["epsilon", "--sampling-rate", "0.01", "--epochs", "inf", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--epochs: must be",
    ),
    "epsilon epochs too many steps": (
        ["epsilon", "--sampling-rate", "1e-6", "--epochs", "1000", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--steps must be an integer in [1, 10000000]",
    ),
    "epsilon lot size above N": (
        words("epsilon --dataset-size 100 --lot-size 200 --steps 5 --delta 1e-5 --noise-multiplier 1"),
        "--lot-size must be in [1, --dataset-size=100]",
    ),
    "epsilon dataset size zero": (
        words("epsilon --dataset-size 0 --lot-size 1 --steps 5 --delta 1e-5 --noise-multiplier 1"),
        "--dataset-size: must be an integer in [1, 1000000000]",
    ),
    "epsilon unknown accountant": ([*EPSILON, "--accountant", "magic"], "invalid choice"),
    "calibrate epsilon inf": (changed(CALIBRATE, "--epsilon", "inf"), "--epsilon: must be a number in [0.01, 100]"),
    "calibrate epsilon 1e308": (changed(CALIBRATE, "--epsilon", "1e308"), "--epsilon: must be a number in [0.01, 100]"),
    "calibrate epsilon zero": (changed(CALIBRATE, "--epsilon", "0"), "--epsilon: must be"),
    "calibrate epsilon NaN": (changed(CALIBRATE, "--epsilon", "nan"), "--epsilon: must be"),
    "calibrate unreachable": (
        words("calibrate --sampling-rate 1 --steps 10000000 --delta 1e-9 --epsilon 0.01 --accountant rdp"),
        "unreachable",
    ),
    "calibrate without a schedule": (["calibrate", "--epsilon", "1", "--delta", "1e-5"], "give --sampling-rate"),
    "calibrate with no steps": (
        ["calibrate", "--epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0.01"],
        "give --steps",
    ),
}

# ---------------------------------------------------------------------------------------- archives

ARCHIVE_EXTRA: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "a spec dataset that is not a string": (
        first_run(
            lambda r: r.update(engine_version="9.9.9", created_at=4_102_444_800.0, spec={**r["spec"], "dataset": 7})
        ),
        "spec.dataset: must be a string",
    ),
    "a finished result without test_accuracy": (
        first_run(lambda r: r["result"].pop("test_accuracy")),
        "result.test_accuracy: missing",
    ),
    "a string epsilon": (first_run(lambda r: r["result"].update(epsilon="1e-6")), "result.epsilon: must be of type"),
    "an accuracy above one": (first_run(lambda r: r["result"].update(test_accuracy=1.5)), "must be in [0, 1]"),
    "a plan value that is text": (first_run(lambda r: r["plan"].update(steps="5")), "plan.steps: must be a number"),
    "a finished run without result": (first_run(lambda r: r.update(result=None)), "result: missing"),
    "a spec model that is a list": (first_run(lambda r: r["spec"].update(model=["logreg"])), "spec.model"),
    "metrics out of order": (
        lambda data: _swap_metric_rows(data),
        "rows are in (step, name) order",
    ),
}


def _swap_metric_rows(data: bytes) -> bytes:
    members = unzip(data)
    name = next(n for n in members if n.startswith("metrics/"))
    header, first, second, *rest = members[name].decode().splitlines(keepends=True)
    members[name] = "".join([header, second, first, *rest]).encode()
    return rezip(members, zipfile.ZIP_STORED)


@pytest.fixture(scope="module")
def good_archive(tmp_path_factory) -> bytes:
    source = Store(tmp_path_factory.mktemp("source") / "runs.sqlite3")
    ids = populated(source)
    return export_runs(source, [ids["finished"], ids["failed"]], sweep_id=ids["sweep"])


ARCHIVES = {
    **{f"archive: {k}": v for k, v in MALFORMED_ARCHIVES.items()},
    **{f"archive: {k}": v for k, v in ARCHIVE_EXTRA.items()},
}

# ---------------------------------------------------------------------------------------- every case

CASES = (
    [("submit", case) for case in SPECS]
    + [("train", case) for case in TRAIN_SAMPLE]
    + [("csv submit", case) for case in CSVS]
    + [("csv train", case) for case in ("bad numeric cell", "label not a class", "ragged row", "a 400-digit bound")]
    + [("sweep", case) for case in GRIDS]
    + [("call", case) for case in CALLS]
    + [("import", case) for case in ARCHIVES]
)


def test_the_suite_covers_at_least_150_inputs():
    assert len(CASES) >= 150, len(CASES)


def argv_for(kind: str, case: str, files: Path, good_archive: bytes) -> tuple[list[str], str]:
    if kind in ("submit", "train"):
        return [kind, str(spec_file(files, case))], SPECS[case][1]
    if kind.startswith("csv"):
        return [kind.split()[1], str(csv_case_file(files, case))], CSVS[case][2]
    if kind == "sweep":
        return ["sweep", str(grid_file(files, case))], GRIDS[case][1]
    if kind == "call":
        return CALLS[case]
    corrupt, mentions = ARCHIVES[case]
    path = files / f"archive-{hashlib.sha256(case.encode()).hexdigest()[:12]}.zip"
    path.write_bytes(corrupt(good_archive))
    return ["import", str(path)], mentions


@pytest.mark.parametrize(("kind", "case"), CASES)
def test_malformed_input_is_a_named_error_with_status_2_and_the_store_unchanged(
    kind, case, workspace, good_archive, capsys
):
    store, files = workspace
    argv, mentions = argv_for(kind, case, files, good_archive)
    before = digest(store.path)
    started = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err[:2000]
    assert err.startswith("error: ") and err.count("\n") == 1, err[:2000]
    assert mentions in err or re.search(mentions, err), err[:2000]
    assert len(err) < 2_000, f"the message echoes {len(err):,} characters"
    assert digest(store.path) == before, "the store changed"
    assert elapsed < HANG_BOUND_S, f"{elapsed:.1f} s: a hang or unbounded work"


# ---------------------------------------------------------------------------------------- files that are not files


@pytest.mark.parametrize("command", ["submit", "train", "sweep", "import"])
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "/dev/null", "fifo", "directory", "missing"])
def test_only_regular_files_are_read_and_nothing_blocks(command, special, workspace, capsys):
    store, files = workspace
    path = {"fifo": files / "a-fifo", "directory": files, "missing": files / "missing.json"}.get(special, special)
    if special == "fifo" and not Path(path).exists():
        os.mkfifo(path)
    before = digest(store.path)
    started = time.monotonic()
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - started < HANG_BOUND_S
    expected = {
        "fifo": "is a FIFO",
        "directory": "is a directory",
        "missing": "No such file or directory",
        "/dev/null": "is a character device",
    }.get(special, "is a character device")
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err
    assert digest(store.path) == before


# ---------------------------------------------------------------------------------------- real processes


@pytest.mark.slow
def test_real_processes_exit_2_with_one_line_and_no_traceback(home, store, tmp_path):
    fifo = tmp_path / "spec-fifo"
    os.mkfifo(fifo)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(fast_spec(delta=1)))
    before = digest(store.path)
    cases = (
        ["submit", str(fifo)],
        ["submit", "/dev/zero", "--json"],
        ["submit", str(spec), "--json"],
        [*changed(CALIBRATE, "--epsilon", "inf"), "--json"],
        ["show", "nope", "--json"],
        ["runs", "--limit", "x", "--json"],
    )
    for argv in cases:
        proc = cli(home, *argv, check=False, timeout=120)
        assert proc.returncode == 2, (argv, proc.stderr[-2000:])
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        if "--json" in argv:
            error = json.loads(proc.stdout)
            assert set(error) == {"error", "kind"} and error["error"] in proc.stderr
    assert digest(store.path) == before


def test_cancelling_a_finished_run_is_an_error_that_changes_nothing(workspace, capsys):
    store, _ = workspace
    [done, *_] = store.list_runs(statuses=[RunStatus.FINISHED])
    before = digest(store.path)
    assert main(["cancel", done.id]) == 2
    assert "already finished" in capsys.readouterr().err
    assert digest(store.path) == before


def test_an_unexpected_exception_is_one_line_with_status_1(workspace, capsys, monkeypatch):
    from engine.cli import run_commands

    def broken(args, store):
        raise KeyError("a bug\nover two lines")

    monkeypatch.setattr(run_commands, "cmd_runs", broken)
    assert main(["runs"]) == 1
    err = capsys.readouterr().err
    assert err == "error: internal error: KeyError: 'a bug\\nover two lines'\n", err


def test_train_that_is_refused_records_nothing(workspace, capsys):
    """A CSV run with a bad cell used to exit 2 yet leave a failed run and a worker row behind."""
    store, files = workspace
    before = digest(store.path)
    assert main(["train", str(csv_case_file(files, "bad numeric cell"))]) == 2
    assert "line 4, column 'age'" in capsys.readouterr().err
    assert digest(store.path) == before
    assert not [w for w in store.list_workers(include_stopped=True) if w.backend == "cli"]


def test_a_forged_import_is_never_served_as_a_local_result(workspace, capsys, tmp_path):
    """An archive run of this engine version with a made-up result (accuracy 0.9999, ε 1e-6) used to become a
    cache hit that `submit` and `train` then answered with, unmarked."""
    store, _ = workspace
    source = Store(tmp_path / "source.sqlite3")
    run_id = make_run(source, seed=77)

    def forge(run):
        run["result"].update(test_accuracy=0.9999, epsilon=1e-6)

    forged = tmp_path / "forged.zip"
    forged.write_bytes(rewrite_runs(export_runs(source, [run_id]), forge))
    assert main(["import", str(forged), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["imported"] == [run_id] and report["cache_hits"] == []
    assert store.get_run(run_id).imported and store.get_run(run_id).cache_key.startswith("imported:")
    spec = tmp_path / "same.json"
    spec.write_text(json.dumps(fast_spec(seed=77)))
    assert main(["submit", str(spec), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["id"] != run_id and not answer["cached"] and not answer["existing"]
    store.request_cancel(answer["id"])


def test_an_import_the_user_trusts_is_served_and_marked(home, store, capsys, tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    run_id = make_run(source, seed=78)
    archive = tmp_path / "trusted.zip"
    archive.write_bytes(export_runs(source, [run_id]))
    assert main(["import", str(archive), "--serve-from-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cache_hits"] == [run_id]
    spec = tmp_path / "same.json"
    spec.write_text(json.dumps(fast_spec(seed=78)))
    assert main(["submit", str(spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"id": run_id, "cached": True, "existing": True, "imported": True}
    assert main(["train", str(spec)]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out.strip().splitlines()[-1])
    assert result["cached"] and result["imported"] and result["run_id"] == run_id
    assert "imported from an archive" in out.err


def test_runs_lists_any_record_an_import_admits(home, store, capsys, tmp_path):
    source = Store(tmp_path / "source.sqlite3")
    ids = [make_run(source, seed=90), make_run(source, RunStatus.FAILED, seed=91)]

    def odd(run):
        run["engine_version"] = "0.0.1"
        run["spec"] |= {"dataset": "csv:/tmp/x.csv", "model": "something newer", "future_key": [1, {"a": None}]}
        run["error"] = "line one\nline two " + "x" * 5000
        if run["result"]:
            run["result"] |= {"epsilon": float("inf"), "extra": "kept"}

    archive = tmp_path / "odd.zip"
    archive.write_bytes(rewrite_runs(export_runs(source, ids), odd))
    assert main(["import", str(archive)]) == 0
    capsys.readouterr()
    assert main(["runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("imported" in line and len(line) < 400 for line in lines), lines
    assert any("ε=∞" in line for line in lines)

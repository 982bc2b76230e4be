"""Plain helpers the test files share (fixtures live in conftest.py, Streamlit AppTest helpers in
apptest_helpers.py, Playwright ones in browser_helpers.py): the digits demo spec, the command line as a
subprocess, polling, free ports, stopping subprocesses, zip archives taken apart and put back, a CSV upload,
noisy GD's two-class test data.

Imports nothing of the project, so that moving a source module never breaks every test at once.
"""

import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

from engine.training.config.examples import digits_demo_spec

ROOT = Path(__file__).resolve().parents[1]


def fast_spec(**overrides) -> dict:
    """The digits demo (digits, logistic regression, ε = 3) with `overrides` applied."""
    return digits_demo_spec(**overrides)


def square_images(n_train: int = 120, n_test: int = 40, seed: int = 0):
    """Generated 1×28×28 images of two classes (a bright square top-left or bottom-right), labelled as MNIST: a
    dataset for the image models without MNIST's files."""
    import numpy as np

    from engine.training import Dataset

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n_train + n_test)
    x = rng.random((n_train + n_test, 28, 28)).astype(np.float32) * 0.3
    for i, label in enumerate(y):
        r = slice(2, 12) if label else slice(16, 26)
        x[i, r, r] += 0.7
    x = x.reshape(len(x), -1)
    return Dataset(
        name="mnist",
        x_train=x[:n_train],
        y_train=y[:n_train],
        x_test=x[n_train:],
        y_test=y[n_train:],
        n_classes=2,
        image_shape=(1, 28, 28),
    )


def blobs_dataset(directory: Path) -> dict:
    """A generated two-class CSV in `directory` (two Gaussian blobs, 400 rows) and its declared schema: noisy GD's
    test problem, as the spec's dataset and schema fields."""
    import numpy as np

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    x = rng.normal(size=(400, 6)) + (2 * y[:, None] - 1) * 2.0
    path = directory / "blobs.csv"
    lines = [",".join([*(f"f{j}" for j in range(6)), "label"])]
    rows = zip(x, y, strict=True)
    lines += [",".join([*(f"{v:.5f}" for v in row), "pos" if label else "neg"]) for row, label in rows]
    path.write_text("\n".join(lines) + "\n")
    schema = {"target": "label", "classes": ["neg", "pos"], "numeric": {f"f{j}": [-4, 4] for j in range(6)}}
    return {"dataset": f"csv:{path}", "schema": schema}


def noisy_gd_spec(blobs: dict, **overrides) -> dict:
    """Noisy gradient descent on `blobs_dataset`'s data, with `overrides` applied."""
    return {
        **blobs,
        "model": "logreg",
        "algorithm": "noisy_gd",
        "delta": 1e-5,
        "clip_norm": 1.0,
        "epochs": 20,
        "lr": 5.0,
        "seed": 0,
    } | overrides


# ---------------------------------------------------------------------------------------- the command line


def home_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment for a subprocess of the project: `home` as the data home (DPLAB_HOME), the
    repository importable, then `extra`."""
    return {**os.environ, "DPLAB_HOME": str(home), "PYTHONPATH": str(ROOT), **extra}


def cli(home: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m engine *args` in a subprocess on the data home `home`; with `check`, it must exit 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=ROOT,
        env=home_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def last_json(proc: subprocess.CompletedProcess):
    """The JSON object on the last line a command printed."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------- processes and waiting


def wait_for(predicate: Callable, *, timeout: float = 30.0, what: str = "condition", every: float = 0.1):
    """The first truthy value of `predicate()`, polled every `every` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, 10 s to exit, then SIGKILL: the process alone."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def stop_process_group(proc: subprocess.Popen) -> int:
    """SIGTERM, 60 s to exit (its exit status is returned), then SIGKILL to its whole process group: for a
    process started with `start_new_session=True` (a worker pool and its children)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------- zip archives


def unzip(data: bytes) -> dict[str, bytes]:
    """An archive's members by name."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def rezip(members, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """An archive of `members` (a dict, or (name, data) pairs: duplicate names allowed, on purpose)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", compression=compression) as zf:
        warnings.simplefilter("ignore")  # duplicate names, on purpose
        for name, data in members.items() if isinstance(members, dict) else members:
            zf.writestr(name, data)
    return buffer.getvalue()


def edit_json(member: str, change: Callable) -> Callable[[bytes], bytes]:
    """An archive edit: the JSON member `member` replaced by `change(obj)` (or by `obj`, changed in place)."""

    def edit(data: bytes) -> bytes:
        members = unzip(data)
        obj = json.loads(members[member])
        members[member] = json.dumps(change(obj) or obj).encode()
        return rezip(members)

    return edit


# ---------------------------------------------------------------------------------------- data


def synthetic_csv(rows: int = 200, seed: int = 0) -> bytes:
    """age and income numeric, city categorical, notes free text (ignored), label the target."""
    rng = random.Random(seed)
    lines = ["age,income,city,notes,label"]
    for i in range(rows):
        city = rng.choice(["Lyon", "Oslo", "Quito"])
        age = rng.randint(18, 90)
        label = "yes" if (age > 50) ^ (rng.random() < 0.1) else "no"
        lines.append(f"{age},{rng.uniform(0, 200_000):.2f},{city},free text {i},{label}")
    return ("\n".join(lines) + "\n").encode()


def synthetic_schema() -> dict:
    """The schema `synthetic_csv` is written against (a fresh dict: a test may change its copy)."""
    return {
        "target": "label",
        "classes": ["no", "yes"],
        "numeric": {"age": [17, 100], "income": [0, 250_000]},
        "categorical": {"city": ["Lyon", "Oslo", "Quito"]},
        "test_fraction": 0.25,
    }


def binary_spec(dataset_fields: dict, algorithm: str, *, epochs: int, **changes) -> dict:
    """A spec of `algorithm` on a two-class CSV (`dataset_fields`: its dataset and schema keys), with the options
    each algorithm needs; `changes` applied last, a None removing its key."""
    base = dataset_fields | {"algorithm": algorithm, "seed": 0, "delta": 1e-4, "target_epsilon": 2.0}
    if algorithm in ("noisy_gd", "nonprivate"):
        base |= {"model": "logreg", "epochs": epochs, "lr": 1.0, "clip_norm": 1.0}
    if algorithm == "sq_laplace":
        base |= {"epochs": epochs, "lr": 1.0}
    if algorithm in ("rwm_online", "rwm_linear", "expmech_stumps"):
        base |= {"thresholds": 8}
    return {k: v for k, v in (base | changes).items() if v is not None}

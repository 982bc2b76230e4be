"""Archive suite: the memory and time an import takes, against the archive's size.

A synthetic archive of this engine's format (`synthetic_archive`: R finished digits runs, each with T
steps of the metrics a run records, written member by member) is imported into a fresh store by
`python -m engine import` in a fresh process, whose peak resident set (`ru_maxrss`, read by the
parent after it exits) is compared with the same process importing nothing (`--help` after the same
imports), so the figure is the import's own memory. Each size is imported three times (median).

`--quick`: a 4 MB archive only; the full suite adds about 16 and 64 MB ones.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from cache.archive.format import FORMAT_NAME, FORMAT_VERSION
from engine import ENGINE_VERSION
from engine.training import parse_spec

ROOT = Path(__file__).resolve().parents[1]
METRICS = (
    "clip_fraction",
    "epsilon",
    "epsilon_pld",
    "grad_norm_p10",
    "grad_norm_p50",
    "grad_norm_p90",
    "lot_accuracy",
    "lot_size",
    "test_accuracy",
    "train_loss",
)
REPEATS = 3


def _result(steps: int) -> dict:
    return {
        "algorithm": "dpsgd",
        "private": True,
        "test_accuracy": 0.9,
        "test_loss": 0.3,
        "epsilon": 2.5,
        "delta": 1e-5,
        "noise_multiplier": 1.1,
        "sampling_rate": 0.0445,
        "steps": steps,
        "planned_steps": steps,
        "accountant": "pld",
        "epsilons": {"rdp": 2.9, "pld": 2.5, "naive": float("inf")},
        "best_order": 5.0,
        "order_at_edge": False,
        "privacy_statement": "(2.5, 1e-05)-DP.",
        "stopped_early": False,
        "seconds": 1.5,
        "device": "cpu",
    }


RECORDED_AT = 1_700_000_000.0  # 2023-11-14: the runs' creation times start here


def synthetic_archive(path: Path, *, runs: int, steps: int) -> int:
    """Write an archive of `runs` finished runs with `steps` steps of metrics each; returns its bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "created_at": time.time(),
            "engine_version": ENGINE_VERSION,
            "run_count": runs,
            "sweep_count": 0,
            "includes_metrics": True,
        }
        zf.writestr("manifest.json", json.dumps(manifest))
        with zf.open("runs.json", "w") as out:
            out.write(b"[")
            for i in range(runs):
                spec = parse_spec(
                    {
                        "dataset": "digits",
                        "model": "logreg",
                        "algorithm": "dpsgd",
                        "lot_size": 64,
                        "noise_multiplier": 1.0,
                        "delta": 1e-5,
                        "clip_norm": 1.0,
                        "epochs": 1 + i % 50,
                        "lr": 2.0,
                        "seed": i,
                    }
                )
                at = RECORDED_AT + i  # a time an archive holds: after 2000, not in the future
                events = [
                    {"seq": 0, "at": at, "status": "queued", "worker": None, "detail": "submitted"},
                    {"seq": 1, "at": at + 1, "status": "running", "worker": "w", "detail": None},
                    {"seq": 2, "at": at + 2, "status": "finished", "worker": "w", "detail": None},
                ]
                run = {
                    "id": f"r{i:011d}",
                    "cache_key": "k",
                    "engine_version": ENGINE_VERSION,
                    "status": "finished",
                    "spec": spec.to_dict(),
                    "plan": {"steps": steps, "noise_multiplier": 1.0},
                    "result": _result(steps),
                    "error": None,
                    "created_at": at,
                    "started_at": at + 1,
                    "finished_at": at + 2,
                    "progress_step": steps,
                    "total_steps": steps,
                    "attempts": 1,
                    "events": events,
                }
                out.write((", " if i else "").encode() + json.dumps(run).encode())
            out.write(b"]")
        for i in range(runs):
            with zf.open(f"metrics/r{i:011d}.csv", "w") as out:
                out.write(b"step,name,value\n")
                for step in range(steps + 1):
                    out.write(
                        "".join(f"{step},{name},{0.001 * step + j / 7!r}\n" for j, name in enumerate(METRICS)).encode()
                    )
    return path.stat().st_size


PROBE = """
import resource, sys, time
from cache import Store
from engine.jobs.transfer import import_runs
store = Store(sys.argv[1])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
report = import_runs(store, sys.argv[2]) if sys.argv[2] != "-" else None
took = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(base, peak, took, len(report.imported) if report else 0)
"""


def _import_once(archive: Path | None) -> tuple[float, float, int]:
    """(resident set the import added, MB; seconds; runs imported), in a fresh process and store."""
    with tempfile.TemporaryDirectory() as home:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(Path(home) / "runs.sqlite3"), str(archive or "-")],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
            timeout=3600,
        )
    base, peak, took, imported = out.stdout.split()
    return (int(peak) - int(base)) / 1024, float(took), int(imported)


def run(quick: bool = False) -> list[dict]:
    sizes = [(400, 100)] if quick else [(400, 100), (1600, 100), (1600, 400)]
    records = []
    with tempfile.TemporaryDirectory() as folder:
        for runs, steps in sizes:
            path = Path(folder) / f"archive-{runs}x{steps}.zip"
            megabytes = synthetic_archive(path, runs=runs, steps=steps) / 1e6
            with zipfile.ZipFile(path) as zf:
                inflated = sum(i.file_size for i in zf.infolist()) / 1e6
            samples = [_import_once(path) for _ in range(REPEATS)]
            assert all(imported == runs for _, _, imported in samples)
            added = statistics.median(s[0] for s in samples)
            seconds = statistics.median(s[1] for s in samples)
            label = f"{runs}_runs_{megabytes:.0f}MB_zip_{inflated:.0f}MB_inflated"
            records += [
                {
                    "name": f"archive/import_rss_added_{label}",
                    "value": added,
                    "unit": "MB",
                    "spread": [min(s[0] for s in samples), max(s[0] for s in samples)],
                },
                {"name": f"archive/import_rss_added_per_zip_MB_{label}", "value": added / megabytes, "unit": "×"},
                {
                    "name": f"archive/import_seconds_{label}",
                    "value": seconds,
                    "unit": "s",
                    "spread": [min(s[1] for s in samples), max(s[1] for s in samples)],
                },
            ]
    return records

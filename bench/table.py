"""Table suite: the reproduced accuracy-vs-ε table, each row on several seeds (mean ± sd of test accuracy), set
beside its target and the published figure, one JSON record per row (`bench.table_rows` holds the rows).

A row whose hyperparameters are searched is charged for the search: its σ is the smallest for which releasing the
best of a private search (Papernot & Steinke 2022; truncated negative binomial, η = 0.5) costs at most the row's ε
(`bench.search.calibrate`), and the ε reported is that search's. Each of its seeds is one whole search (K and
every trial drawn afresh, from OS randomness); the best trial's test accuracy is what that search releases, at
the search's ε. The mean over seeds describes the procedure; no figure composes the seeds. A row with a published
setting tunes nothing and says so ("charged: not needed").

Rows marked slow (hours on a CPU) are not trained unless DPLAB_BENCH_SLOW=1: their record states the ε and the
settings they would train and that they await a GPU. `--quick` runs the Adult row only, with a smaller search.
`DPLAB_TABLE_ROWS=name,name` runs only the rows named, slow ones included. The GPU variant (`run(gpu=True)`, the
`table` step of `python -m bench.gpu_check`) trains the rows marked for it,
in order, and records any left when its time cap passes as not run. `python -m bench --records DIR` writes each
row's record to DIR/<row>.json.
"""

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.hardware import hardware
from bench.search import DISTRIBUTION, SearchRow, calibrate, grid_spec
from bench.table_rows import ROWS, TableRow
from bench.utility import MAX_SPEC_EPOCHS, SLOW, Datasets, fill
from engine.jobs.sweep import expand_sweep
from engine.privacy import PrivacyError, panel
from engine.training import Dataset, SpecError, TrainingPlan, dataset_info, parse_spec, plan_run, train

GPU_TIME_CAP_S = 480.0  # the GPU variant starts no row after this (one H200 lease: ≤ 10 minutes in all)
SEARCH_ACCOUNTANT = "RDP of releasing the best of K trials (Papernot & Steinke 2022), each trial's whole ledger"
NOT_NEEDED = "not needed (hyperparameters from the paper)"
AWAITS_GPU = "awaits a GPU (hours on a CPU; DPLAB_BENCH_SLOW=1 trains it here)"


@dataclass(frozen=True, kw_only=True)
class Planned:
    """A row's privacy as it will train: ε, δ, the accountant, what was charged, and the settings that set them."""

    spec: dict[str, Any]  # the run spec (fixed row, epochs filled) or the search's grid spec (σ calibrated)
    epsilon: float
    delta: float
    accountant: str
    charged: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    search: SearchRow | None = None
    plan: TrainingPlan | None = None  # a fixed row's plan (no plan depends on the seed): each seed trains it


ROWS_VARIABLE = "DPLAB_TABLE_ROWS"  # comma-separated row names: run only these, slow or not


def run(
    quick: bool = False, *, rows: Sequence[TableRow] | None = None, gpu: bool = False, time_cap_s: float | None = None
) -> list[dict]:
    datasets = Datasets()
    started = time.perf_counter()
    records = []
    for row in select(ROWS if rows is None else rows, quick=quick, gpu=gpu):
        if time_cap_s is not None and time.perf_counter() - started > time_cap_s:
            records.append(untrained_record(row, quick=quick, gpu=gpu, reason="not run: past the GPU step's time cap"))
        elif gpu or SLOW or not row.slow or os.environ.get(ROWS_VARIABLE):
            records.append(trained_record(row, datasets, quick=quick, gpu=gpu))
        else:
            records.append(untrained_record(row, quick=quick, gpu=gpu, reason=AWAITS_GPU))
    print(summary_table(records), file=sys.stderr)
    return records


def select(rows: Sequence[TableRow], *, quick: bool, gpu: bool) -> list[TableRow]:
    """The rows to run: those named in `DPLAB_TABLE_ROWS` (comma-separated names; trained even when slow), else the
    GPU variant's in order, else all (`quick`: the quick ones)."""
    if named := [n.strip() for n in os.environ.get(ROWS_VARIABLE, "").split(",") if n.strip()]:
        if unknown := sorted(set(named) - {r.name for r in rows}):
            raise SystemExit(f"error: {ROWS_VARIABLE}: no row named {', '.join(unknown)}")
        return [r for r in rows if r.name in named]
    if gpu:
        return sorted((r for r in rows if r.gpu_order is not None), key=lambda r: r.gpu_order)
    return [r for r in rows if r.quick or not quick]


# --- Privacy: planned before anything trains --------------------------------------------------------------------


def plan_row(row: TableRow, *, n_train: int, quick: bool) -> Planned:
    """The row's ε as it will be reported (`SpecError` when this engine refuses its spec)."""
    if row.searched:
        mean = row.quick_mean_trials if quick and row.quick_mean_trials is not None else row.mean_trials
        search = SearchRow(
            name=row.name, base=row.spec, grid=row.grid, target_epsilon=row.epsilon, mean=mean, uncharged=None
        )
        sigma, privacy = calibrate(search)
        charged = {
            "charged": True,
            "search_included": True,
            "accountant": SEARCH_ACCOUNTANT,
            "distribution": DISTRIBUTION | {"mean": mean},
            "grid": row.grid,
            "configurations": privacy.search.configurations,
            "noise_multiplier": sigma,
            "search_epsilon": privacy.search.epsilon,
            "search_delta": privacy.search.delta,
            "fixed_grid_epsilon": privacy.composition_epsilon,
        }
        return Planned(
            spec=grid_spec(search, sigma),
            epsilon=privacy.search.epsilon,
            delta=privacy.search.delta,
            accountant="search (rdp)",
            charged=charged,
            settings={"noise_multiplier": sigma, "epochs": row.spec["epochs"]},
            search=search,
        )
    if row.fill:
        seeded = {**row.spec, "seed": row.seeds[0]}  # each seed trains the same epochs
        spec, plan, budget = fill(seeded, target_epsilon=row.epsilon, max_epochs=MAX_SPEC_EPOCHS, n_train=n_train)
        settings = budget.fields()
    else:
        spec = row.spec
        plan = plan_run(parse_spec({**spec, "seed": row.seeds[0]}), n_train=n_train)
        settings = {}
    accountant, epsilon = panel(plan.ledger(), delta=plan.delta).tightest()
    settings |= {"noise_multiplier": plan.noise_multiplier, "epochs": plan.steps * plan.lot_size / n_train}
    settings |= {"steps": plan.steps}
    return Planned(
        spec=spec,
        epsilon=epsilon,
        delta=plan.delta,
        accountant=accountant,
        charged={"charged": NOT_NEEDED, "search_included": False},
        settings=settings,
        plan=plan,
    )


# --- Training ---------------------------------------------------------------------------------------------------


def train_row(row: TableRow, planned: Planned, data: Dataset, dirs: list) -> tuple[list[float], list[dict], float]:
    """Per-seed test accuracies, what each seed trained, and the ε the results report (the largest)."""
    accuracies, per_seed, epsilons = [], [], []
    for seed in row.seeds:
        if planned.search is not None:  # one whole private search per seed
            trials = expand_sweep(planned.spec)
            results = [(p.values, train(parse_spec(p.spec), data_dirs=dirs, dataset=data)) for p in trials]
            values, best = max(results, key=lambda pair: pair[1].test_accuracy)
            accuracies.append(best.test_accuracy)
            per_seed.append(
                {
                    "search": seed,
                    "trials": [{**v, "test_accuracy": r.test_accuracy, "epsilon": r.epsilon} for v, r in results],
                    "best": values,
                    "test_accuracy": best.test_accuracy,
                }
            )
            epsilons.append(planned.epsilon)
        else:
            spec = parse_spec({**planned.spec, "seed": seed})
            result = train(spec, data_dirs=dirs, dataset=data, plan=planned.plan)
            accuracies.append(result.test_accuracy)
            per_seed.append({"seed": seed, "test_accuracy": result.test_accuracy, "epsilon": result.epsilon})
            per_seed[-1] |= {"accountant": result.accountant, "seconds": result.seconds}
            epsilons.append(result.epsilon)
    return accuracies, per_seed, max(epsilons)


def mean_and_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (n − 1; None for one value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


# --- Records ----------------------------------------------------------------------------------------------------


def common_fields(row: TableRow, *, quick: bool, gpu: bool) -> dict[str, Any]:
    spec = row.spec
    model = spec.get("model") or " | ".join((row.grid or {}).get("model", []))
    features = spec.get("features") or (f"DP-PCA {spec['pca_dims']}" if "pca_dims" in spec else "raw")
    return {
        "row": row.name,
        "title": row.title,
        "dataset": spec["dataset"],
        "model": model,
        "features": features,
        "target_accuracy": row.target_accuracy,
        "target_epsilon": row.epsilon,
        "paper_accuracy": row.paper_accuracy,
        "paper_source": row.paper_source,
        "source": row.source,
        "hardware": hardware(),
        "command": command(row, quick=quick, gpu=gpu),
    }


def trained_record(row: TableRow, datasets: Datasets, *, quick: bool, gpu: bool) -> dict:
    data = datasets.get(row.spec["dataset"])
    if data is None:
        reason = f"not run: no {row.spec['dataset']} files here (DPLAB_DATA_DIR)"
        return untrained_record(row, quick=quick, gpu=gpu, reason=reason)
    started = time.perf_counter()
    try:
        planned = plan_row(row, n_train=len(data.x_train), quick=quick)
    except (SpecError, PrivacyError) as exc:
        return refused_record(row, exc, quick=quick, gpu=gpu)
    accuracies, per_seed, epsilon = train_row(row, planned, data, datasets.dirs)
    mean, sd = mean_and_sd(accuracies)
    seconds = time.perf_counter() - started
    print(f"  {row.name}: {mean:.4f} ± {sd or 0:.4f} over {len(accuracies)} at ε {epsilon:.3f}", file=sys.stderr)
    return {
        "name": f"table/{row.name}/test_accuracy",
        "value": mean,
        "unit": "accuracy",
        "trained": True,
        **common_fields(row, quick=quick, gpu=gpu),
        "epsilon": epsilon,
        "delta": planned.delta,
        "accountant": planned.accountant,
        "accuracy_mean": mean,
        "accuracy_sd": sd,
        "accuracies": accuracies,
        "seeds": list(row.seeds),
        "per_seed": per_seed,
        "charged": planned.charged,
        "settings": planned.settings,
        "target_met": bool(mean >= row.target_accuracy and epsilon <= row.epsilon),
        "seconds": seconds,
        "compared": f"± {sd or 0:.4f} over {len(accuracies)}; ε {epsilon:.3f}; target {row.target_accuracy:g}; "
        f"paper {row.paper_accuracy:g}",
        "spec": planned.spec,
    }


def untrained_record(row: TableRow, *, quick: bool, gpu: bool, reason: str) -> dict:
    """A row not trained here: its ε and the settings it would train (from the dataset's public size)."""
    try:
        planned = plan_row(row, n_train=dataset_info(row.spec["dataset"]).n_train, quick=quick)
    except (SpecError, PrivacyError) as exc:
        return refused_record(row, exc, quick=quick, gpu=gpu)
    print(f"  {row.name}: {reason}; ε {planned.epsilon:.3f}", file=sys.stderr)
    return {
        "name": f"table/{row.name}/epsilon",
        "value": planned.epsilon,
        "unit": "ε",
        "trained": False,
        "reason": reason,
        "compared": reason,
        **common_fields(row, quick=quick, gpu=gpu),
        "epsilon": planned.epsilon,
        "delta": planned.delta,
        "accountant": planned.accountant,
        "seeds": list(row.seeds),
        "charged": planned.charged,
        "settings": planned.settings,
        "spec": planned.spec,
    }


def refused_record(row: TableRow, exc: Exception, *, quick: bool, gpu: bool) -> dict:
    print(f"  {row.name}: this engine refuses its spec ({exc})", file=sys.stderr)
    return {
        "name": f"table/{row.name}/epsilon",
        "value": math.nan,
        "unit": "ε",
        "trained": False,
        "reason": f"spec refused by this engine: {exc}",
        "compared": f"spec refused: {str(exc).split(';')[0]}",
        **common_fields(row, quick=quick, gpu=gpu),
        "seeds": list(row.seeds),
        "spec": row.spec,
    }


def command(row: TableRow, *, quick: bool, gpu: bool) -> str:
    data = f"DPLAB_DATA_DIR={os.environ['DPLAB_DATA_DIR']} " if "DPLAB_DATA_DIR" in os.environ else ""
    if gpu:
        return f"{data}python -m bench.gpu_check --out DIR  # its 'table' step; the row's record is DIR/table/"
    slow = "DPLAB_BENCH_SLOW=1 " if row.slow else ""
    flags = " --quick" if quick else ""
    return f"{data}{slow}python -m bench --suite table{flags} --threads {torch.get_num_threads()} --records DIR"


def write_records(records: Sequence[dict], directory: Path) -> list[Path]:
    """Each table row's record as DIR/<row>.json; the other suites' records are left to `--json`."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for record in records:
        if record["name"].startswith("table/"):
            path = directory / f"{record['row']}.json"
            path.write_text(json.dumps(record, indent=2) + "\n")
            written.append(path)
    return written


# --- The table a person reads -----------------------------------------------------------------------------------


def summary_table(records: Sequence[dict]) -> str:
    lines = [
        "reproduced table (mean ± sd of test accuracy over seeds; a searched row's ε includes its search):",
        "| row | accuracy | seeds | ε (δ) | search charged | target | met | paper | s |",
        "|---|---:|---:|---|---|---|---|---|---:|",
    ]
    for r in records:
        if not r["name"].startswith("table/"):
            continue
        epsilon = "" if "epsilon" not in r else f"{r['epsilon']:.3f} ({r['delta']:.2g})"
        charged = r.get("charged", {}).get("charged", "")
        charged = "yes" if charged is True else ("not needed" if charged else "")
        target = f"≥ {r['target_accuracy']:g} at ε ≤ {r['target_epsilon']:g}"
        paper = f"{r['paper_accuracy']:g}"
        if r["trained"]:
            sd = "" if r["accuracy_sd"] is None else f" ± {r['accuracy_sd']:.4f}"
            cells = (f"{r['accuracy_mean']:.4f}{sd}", str(len(r["accuracies"])), epsilon, charged)
            cells += (target, "yes" if r["target_met"] else "no", paper, f"{r['seconds']:.0f}")
        else:
            cells = (r["reason"][:90], "", epsilon, charged, target, "", paper, "")
        lines.append(f"| {r['title']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

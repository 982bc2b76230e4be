"""`python -m bench [--quick] [--json PATH] [--records DIR] [--threads N] [--suite NAME ...]`: run the suites, print a
markdown table, write JSON. The `opacus` and `memory` suites need the benchmark-only Opacus (`make bench` installs it).
Without `--suite`, every suite but the research figures `aniso` (about 13 minutes), `audit` and `search` (name them).
The `utility` suite ends with the reproduced table, which `table` runs alone; `--records DIR` writes each of its rows
to DIR/<row>.json."""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench import accounting, aniso, archive, audit, dashboard, jobs, noise, search, sweep, table, throughput, utility
from bench.hardware import cpu_model
from engine.training import pick_device


def _needs_opacus(suite: str) -> Callable[[bool], list[dict]]:
    def run(quick: bool) -> list[dict]:
        try:
            import opacus  # noqa: F401
        except ImportError:
            print(
                f"skipping the {suite} suite: Opacus is not installed (pip install -r requirements-bench.txt)",
                file=sys.stderr,
            )
            return []
        from bench import memory, opacus_compare

        return {"opacus": opacus_compare, "memory": memory}[suite].run(quick, pick_device())

    return run


SUITES: dict[str, Callable[[bool], list[dict]]] = {
    "throughput": throughput.run,
    "opacus": _needs_opacus("opacus"),
    "memory": _needs_opacus("memory"),
    "sweep": sweep.run,
    "accounting": accounting.run,
    "utility": lambda quick: utility.run(quick) + table.run(quick),
    "jobs": jobs.run,
    "archive": archive.run,
    "dashboard": dashboard.run,
    "aniso": aniso.run,
    "noise": noise.run,
    "audit": audit.run,
    "search": search.run,
    "table": table.run,
}
BY_NAME_ONLY = ("aniso", "audit", "search", "table")  # the utility suite ends with the table


def device_line() -> str:
    device = pick_device()
    parts = [f"device: {device}"]
    if device.type == "cuda":
        parts.append(f"GPU: {torch.cuda.get_device_name(device)}")
    parts += [f"CPU: {cpu_model()}", f"torch {torch.__version__}", f"threads: {torch.get_num_threads()}"]
    return " | ".join(parts)


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def _fmt(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def markdown_table(records: list[dict]) -> str:
    lines = ["| figure | value | unit | compared |", "|---|---:|---|---|"]
    for r in records:
        compared = f"{r['numerator']} / {r['denominator']}" if "numerator" in r else ""
        compared = "; ".join(filter(None, (compared, r.get("compared", ""))))
        lines.append(f"| {r['name']} | {_fmt(r['value'])} | {r['unit']} | {compared} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="batch 256 only, fewer and shorter repetitions")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the figures as a JSON list of records")
    parser.add_argument("--records", type=Path, metavar="DIR", help="write each table row's record to DIR/<row>.json")
    parser.add_argument("--threads", type=int, metavar="N", help="torch intra-op threads (default: torch's own choice)")
    parser.add_argument("--suite", action="append", choices=list(SUITES), help="run only this suite (repeatable)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    load_before = _load()
    start = time.perf_counter()
    records: list[dict] = []
    for name, suite in SUITES.items():
        if (args.suite is None and name not in BY_NAME_ONLY) or (args.suite is not None and name in args.suite):
            records += suite(args.quick)
    elapsed = time.perf_counter() - start

    print(device_line())
    mode = "quick" if args.quick else "full"
    print(f"mode: {mode} | elapsed: {elapsed:.1f} s | 1-min load average: {load_before} before, {_load()} after")
    print()
    print(markdown_table(records))
    if args.json is not None:
        args.json.write_text(json.dumps(records, indent=2) + "\n")
        print(f"\nwrote {len(records)} records to {args.json}", file=sys.stderr)
    if args.records is not None:
        written = table.write_records(records, args.records)
        print(f"wrote {len(written)} row records to {args.records}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

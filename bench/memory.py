"""Peak memory of one training step: non-private SGD, the engine's book-keeping DP step, Opacus.

Each (model, mode) runs in a fresh interpreter (``python -m bench.memory --child SPEC``), so nothing
that an earlier measurement allocated, cached or fragmented is left over. The child builds the model,
the batch (B = 1024 rows of random float32 data) and the step (the same step functions as
`bench.opacus_compare`), runs one warm-up step of the same mode on a separate, identical copy and frees
it (one-time costs: library, kernel, autograd and Opacus initialization, and the pages of library code
that these kernels run through, which count in the resident set), then takes the baseline and runs
two steps.

- CPU: torch's allocations are invisible to ``tracemalloc``, so the figure is the increase of the
  process's peak resident set, ``getrusage(RUSAGE_SELF).ru_maxrss``, over the baseline. Where Linux
  allows it, the peak is first reset to the current resident set (``echo 5 > /proc/self/clear_refs``),
  so the baseline is the memory actually held after set-up, not an earlier transient peak (imports).
  The child runs with ``MALLOC_MMAP_THRESHOLD_=65536``: glibc then maps every block of 64 KiB or more
  on its own and unmaps it when freed, so the resident set follows the bytes torch holds instead of
  freed blocks that the heap keeps. Limits: resident pages, not allocations (memory allocated but
  never touched does not count; library scratch space does); blocks under 64 KiB come from a heap
  that the warm-up step already grew, so a step made only of small tensors (logistic regression)
  shows as ~0 and figures under `RESOLUTION_MB` get no ratio; the model, its weights and the batch are
  in the baseline, so the figure is what one step adds: activations, per-example state, gradients,
  noise. Repeated runs agree within ~0.1 MB.
- CUDA: ``torch.cuda.max_memory_allocated`` over ``memory_allocated`` at the baseline (peak reset there).

Opacus is measured in each of its modes that handles the model; the records name the one with the
smallest peak (``best_opacus``), which the ratio ``bookkeeping / best Opacus`` compares with.
"""

import gc
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import opacus_compare as oc
from engine.training import pick_device

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
RESOLUTION_MB = 1.0  # smaller figures are within the allocator's slack: no ratios to them


@dataclass(frozen=True)
class Settings:
    batch: int
    modes: tuple[str, ...]  # "nonprivate", "bookkeeping", "opacus_<grad_sample_mode>"
    models: tuple[str, ...] | None = None  # labels of `bench.opacus_compare.MODELS`; None: all
    steps: int = 2  # steps after the baseline; the figure is the peak over all of them (≥ 2: state that a step
    # keeps for the next, such as the engine's conv workspace or the last .grad, is live during the second)
    timeout_s: float = 300.0  # per child process


ALL_MODES = ("nonprivate", "bookkeeping", "opacus_hooks", "opacus_functorch", "opacus_ew", "opacus_ghost")
FULL = Settings(batch=1024, modes=ALL_MODES)
QUICK = Settings(batch=1024, modes=("nonprivate", "bookkeeping"), models=("mlp1000", "cnn"))


# ------------------------------------------------------------------------------------ child side


def _reset_peak_rss() -> bool:
    """Set the peak resident set (VmHWM, ru_maxrss) to the current one; False where Linux refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _step(label: str, mode: str, batch: int, device: torch.device) -> Callable[[], None]:
    """The `mode` step of a fresh model (same seed) on a fresh batch of `batch` random rows."""
    case = next(c for c in oc.MODELS if c.label == label)
    torch.manual_seed(oc.SEED)
    model = case.build().to(device)
    x, y = oc.random_batch(case, batch, device)
    if mode == "nonprivate":
        return oc.nonprivate_step(model, x, y)
    if mode == "bookkeeping":
        return oc.engine_step(model, x, y, device)
    return oc.opacus_step(model, x, y, mode.removeprefix("opacus_"))  # wraps `model` in place


def measure_one(label: str, mode: str, batch: int, steps: int, device: torch.device) -> dict:
    """Bytes that `steps` steps of `mode` on model `label` add at their peak over the set-up (run in a fresh process).

    Set-up: the measured model, batch and step; then one warm-up step of the same mode on a separate,
    identical copy, freed before the baseline. It pays the one-time costs (autograd engine, thread
    pools, Opacus' code paths, and the pages of library code that a batch of this size runs through,
    which count in the resident set) outside the measurement."""
    warm_up = _step(label, mode, batch, device)
    warm_up()
    del warm_up
    gc.collect()
    step = _step(label, mode, batch, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        reset = True
    else:
        reset = _reset_peak_rss()
        baseline = _peak_rss_bytes()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = _peak_rss_bytes()
    return {"baseline_bytes": baseline, "peak_bytes": peak, "step_bytes": peak - baseline, "peak_reset": reset}


def _child(spec: str) -> None:
    import warnings

    args = json.loads(spec)
    torch.set_num_threads(args["threads"])
    warnings.simplefilter("ignore")  # Opacus' set-up and hook warnings: expected here
    result = measure_one(args["label"], args["mode"], args["batch"], args["steps"], torch.device(args["device"]))
    print(json.dumps(result))


# ----------------------------------------------------------------------------------- parent side


def measure_in_subprocess(label: str, mode: str, settings: Settings, device: torch.device) -> dict:
    """`measure_one` in a fresh interpreter; raises RuntimeError with the child's last error line if it fails."""
    spec = {"label": label, "mode": mode, "batch": settings.batch, "steps": settings.steps}
    spec |= {"threads": torch.get_num_threads(), "device": str(device)}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "bench.memory", "--child", json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=settings.timeout_s,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        raise RuntimeError(lines[-1][:200])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ratio(prefix: str, num: str, den: str, mb: dict[str, float], **extra: object) -> dict:
    return {
        "name": f"{prefix}/{num}_vs_{den}",
        "value": mb[num] / mb[den],
        "unit": "x",
        "numerator": f"{prefix}/{num}",
        "denominator": f"{prefix}/{den}",
        **extra,
    }


def run(settings_quick: bool = False, device: torch.device | None = None) -> list[dict]:
    settings = QUICK if settings_quick else FULL
    device = device if device is not None else pick_device()
    method = "cuda max_memory_allocated" if device.type == "cuda" else "ru_maxrss increase, fresh process"
    records: list[dict] = []
    for case in oc.MODELS:
        if settings.models is not None and case.label not in settings.models:
            continue
        prefix = f"memory/{case.label}/b{settings.batch}"
        print(f"[memory] {case.label} batch={settings.batch} ...", file=sys.stderr, flush=True)
        mb: dict[str, float] = {}
        unsupported: dict[str, str] = {}
        for mode in settings.modes:
            try:
                result = measure_in_subprocess(case.label, mode, settings, device)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                unsupported[mode] = str(error)
                continue
            mb[mode] = result["step_bytes"] / MB
            extra = {"baseline_mb": result["baseline_bytes"] / MB, "peak_reset": result["peak_reset"]}
            records.append({"name": f"{prefix}/{mode}", "value": mb[mode], "unit": "MB", "method": method, **extra})
        if "bookkeeping" in mb and mb.get("nonprivate", 0.0) >= RESOLUTION_MB:
            records.append(_ratio(prefix, "bookkeeping", "nonprivate", mb))
        opacus = [m for m in mb if m.startswith("opacus_")]
        if "bookkeeping" in mb and opacus and min(mb[m] for m in opacus) >= RESOLUTION_MB:
            best = min(opacus, key=mb.__getitem__)
            records.append(_ratio(prefix, "bookkeeping", best, mb, best_opacus=best, unsupported=unsupported))
    return records


def markdown(records: list[dict]) -> str:
    """One row per model: MB added by one step in each mode, then the ratios to non-private and best Opacus."""
    records = [r for r in records if r["name"].startswith("memory/")]  # other suites' records may be mixed in
    figures = {r["name"]: r for r in records}
    prefixes = list(dict.fromkeys(r["name"].rpartition("/")[0] for r in records if r["unit"] == "MB"))
    head = ["model, batch", *ALL_MODES, "bk / nonprivate", "bk / best Opacus"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for prefix in prefixes:
        cells = [f"{figures[f'{prefix}/{m}']['value']:.1f}" if f"{prefix}/{m}" in figures else "–" for m in ALL_MODES]
        vs_np = figures.get(f"{prefix}/bookkeeping_vs_nonprivate")
        cells.append(f"{vs_np['value']:.2f}×" if vs_np else "n/a")
        best = next((r for r in records if r["name"].startswith(prefix + "/") and "best_opacus" in r), None)
        cells.append(f"{best['value']:.2f}× ({best['best_opacus'].removeprefix('opacus_')})" if best else "n/a")
        lines.append(f"| {prefix.removeprefix('memory/')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        print(markdown(run("--quick" in sys.argv)))

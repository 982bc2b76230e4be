"""Pay a fresh worker process's one-off costs before it takes runs, so that a run's first point reaches the
dashboard in a fraction of a second instead of ~5 s on a CPU.

A worker's first run otherwise pays, on the user's clock: PyTorch's lazy import of `torch._dynamo` (the
optimizers import it on construction, ~3 s), scikit-learn (~0.8 s, the built-in datasets and PCA), the
accounting libraries (σ calibration, the PLD curve), and the first per-example-gradient call. Warming up
trains a few steps of a throw-away run on scikit-learn's built-in digits, on the worker's device, and
records nothing; then it loads the registered datasets whose files are here into the worker's
`LoadedDatasets` (reading MNIST's or Adult's files costs ~1 s, paid now instead of before a run's first
point). `DPLAB_WARMUP=0` turns it off (tests that never train).
"""

import logging
import time

from engine.jobs.workers.datasets import LoadedDatasets
from engine.training import parse_spec, plan_spec, train
from engine.training.config.examples import digits_demo_spec

log = logging.getLogger("dplab.worker")
WARMUP_STEPS = 3
WARMUP_SPEC = digits_demo_spec(epochs=1, lr=0.1)


def warm_up(datasets: LoadedDatasets | None = None) -> float | None:
    """Train WARMUP_STEPS steps of WARMUP_SPEC, import the PLD accountant and preload `datasets`; return the
    seconds it took, or None when it failed (a worker that cannot warm up still takes runs, which then report
    their own error)."""
    started = time.perf_counter()
    try:
        from engine.privacy.accountants import pld  # noqa: F401  (dp_accounting's PLD, for the live curves)

        spec = parse_spec(WARMUP_SPEC)
        steps = 0

        def count(_record) -> None:
            nonlocal steps
            steps += 1

        train(spec, plan=plan_spec(spec), data_dirs=[], on_step=count, should_stop=lambda: steps >= WARMUP_STEPS)
        if datasets is not None:
            log.info("datasets loaded ahead of runs: %s", ", ".join(datasets.preload()) or "none")
    except Exception:  # never fatal: the run that needs the failing piece will say what failed
        log.exception("warm-up failed")
        return None
    return time.perf_counter() - started

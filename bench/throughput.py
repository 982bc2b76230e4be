"""Step throughput: non-private SGD vs. this engine's DP-SGD step with each clipper.

For each (model, batch size) three modes run on the same fixed batch of random float32 data, each on
its own identically initialized model and `torch.optim.SGD` optimizer:

- ``nonprivate``: forward, mean cross-entropy, backward, ``optimizer.step()``;
- ``bookkeeping``: ``BookKeepingClipper.clipped_sum`` → add the noise drawn ahead (``NoiseAhead``, on another
  thread while the step clips) → ``scale`` → set ``.grad`` → ``optimizer.step()`` (the engine's ``dpsgd_step``
  chain, minus Poisson sampling and its diagnostics);
- ``materialized``: the same chain with ``MaterializedClipper`` (per-example gradients via ``torch.func``);
- ``graphed`` (on a GPU only): the book-keeping chain as the engine runs it on a GPU, its clip → noise → 1/L stages
  one CUDA graph replay (`engine.training.algorithms.dpsgd_graph`) over a lot padded to the capacity of a Poisson lot
  of this expected size from MNIST's 60,000 (`lot_capacity`: 328 rows for 256, 1,152 for 1,024), the noise drawn
  ahead and copied in, then ``optimizer.step()``.

Timing: `bench.timing`, the one harness of the speed suites: blocks of about ``block_s`` (0.5 s; 0.3 s with
``--quick``), each ratio measured pair by pair (a block of each side, back to back, the order alternating), its
figure the median of the per-pair ratios with their spread and a self-check that flags a spread above ±10%.
Ratios are throughput ratios: ``bookkeeping / nonprivate`` < 1 is the share of non-private throughput kept and
``bookkeeping / materialized`` > 1 the speedup of book-keeping over materialized clipping.
"""

import copy
import itertools
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.timing import Timing, measure, rate_record, ratio_record, report_unstable
from engine.training import pick_device
from engine.training.algorithms.dpsgd import scale
from engine.training.algorithms.dpsgd_graph import StepGraph, lot_capacity
from engine.training.clipping import BookKeepingClipper, MaterializedClipper
from engine.training.models.architectures import build_model
from engine.training.noise_ahead import NoiseAhead

N_FEATURES = 784
N_CLASSES = 10
IMAGE_SHAPE = (1, 28, 28)  # MNIST-sized images for the CNN: C·H·W = N_FEATURES
MODELS: list[tuple[str, str, dict[str, object]]] = [
    ("logreg", "logreg", {}),  # (label, build_model name, build_model keywords)
    ("mlp1000", "mlp", {"hidden": (1000,)}),
    ("cnn", "cnn", {"image_shape": IMAGE_SHAPE}),  # Tramèr & Boneh 2021's tanh CNN, 26k parameters
]
MODES = ("nonprivate", "bookkeeping", "materialized")
RATIOS = [("bookkeeping", "nonprivate"), ("materialized", "nonprivate"), ("bookkeeping", "materialized")]
GPU_RATIOS = [("graphed", "nonprivate"), ("graphed", "bookkeeping")]
N_TRAIN = 60_000  # MNIST's training set: the Poisson lot whose capacity a graphed step is padded to
CLIP_NORM = 1.0
NOISE_MULTIPLIER = 1.0
LR = 0.05
SEED = 0


FULL = Timing(block_s=0.5, pairs=15, budget_s=120.0)
QUICK = Timing(block_s=0.3, pairs=11, budget_s=40.0)
BATCH_SIZES = {"full": (256, 1024), "quick": (256,)}


def nonprivate_step(model: nn.Module, x: Tensor, y: Tensor) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def dp_step(
    clipper: BookKeepingClipper | MaterializedClipper,
    x: Tensor,
    y: Tensor,
    device: torch.device,
    *,
    graph: StepGraph | None = None,
) -> Callable[[], None]:
    """The engine's DP-SGD chain on the batch (x, y), minus Poisson sampling and diagnostics: clip → noise drawn
    ahead → 1/L → update; with `graph`, its clip → noise → 1/L stages replayed as one CUDA graph (`graphed_step`)."""
    optimizer = torch.optim.SGD(clipper.params, lr=LR)
    noise_generator = torch.Generator(device=device).manual_seed(SEED + 1)
    noise_std = NOISE_MULTIPLIER * CLIP_NORM
    inv_lot = 1.0 / len(x)
    # the engine's noise stage: each step's noise drawn while the step before it clips (`NoiseAhead`)
    ahead = NoiseAhead(clipper.params, lambda step: noise_std, noise_generator, last_step=sys.maxsize)
    lot = torch.arange(len(x), device=device)
    steps = itertools.count(1)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)  # as the engine's dpsgd_step does
        if graph is None:
            clipped = clipper.clipped_sum(x, y, CLIP_NORM)
            update = scale(ahead.add_to(clipped.grads, next(steps)), inv_lot)
        else:
            update = graph.run(x, y, lot, CLIP_NORM, ahead.take(next(steps))).grads
        for param, g in zip(clipper.params, update, strict=True):
            param.grad = g
        optimizer.step()

    return step


def graphed_step(clipper: BookKeepingClipper, x: Tensor, y: Tensor, device: torch.device) -> Callable[[], None]:
    """`dp_step`'s chain as the engine runs it on a GPU: the clip → noise → 1/L stages replayed as one CUDA graph
    over the batch padded to a Poisson lot's capacity, then the optimizer's update."""
    capacity = lot_capacity(N_TRAIN, len(x) / N_TRAIN)
    return dp_step(clipper, x, y, device, graph=StepGraph(clipper, x, y, capacity=capacity, inv_lot=1.0 / len(x)))


def run(quick: bool = False, timing: Timing | None = None) -> list[dict]:
    timing = timing or (QUICK if quick else FULL)
    device = pick_device()
    graphed = device.type == "cuda"
    modes = MODES + (("graphed",) if graphed else ())
    ratios = RATIOS + (GPU_RATIOS if graphed else [])
    records: list[dict] = []
    for label, model_name, options in MODELS:
        for batch in BATCH_SIZES["quick" if quick else "full"]:
            torch.manual_seed(SEED)
            base = build_model(model_name, n_features=N_FEATURES, n_classes=N_CLASSES, **options).to(device)
            x = torch.randn(batch, N_FEATURES, device=device, dtype=torch.float32)
            y = torch.randint(0, N_CLASSES, (batch,), device=device)
            steps = {
                "nonprivate": nonprivate_step(copy.deepcopy(base), x, y),
                "bookkeeping": dp_step(BookKeepingClipper(copy.deepcopy(base)), x, y, device),
                "materialized": dp_step(MaterializedClipper(copy.deepcopy(base)), x, y, device),
            }
            if graphed:
                steps["graphed"] = graphed_step(BookKeepingClipper(copy.deepcopy(base)), x, y, device)
            print(f"[throughput] {label} batch={batch} ...", file=sys.stderr, flush=True)
            measured = measure(steps, ratios, timing, device)
            prefix = f"throughput/{label}/b{batch}"
            records += [rate_record(f"{prefix}/{mode}", measured.rates[mode]) for mode in modes]
            records += [ratio_record(prefix, num, den, measured.ratios[(num, den)]) for num, den in ratios]
            del steps, base, x, y
    report_unstable("throughput", records)
    return records

"""Step throughput: this engine's DP-SGD step against every Opacus per-sample-gradient mode.

For each model and batch size, these modes run on the same fixed batch of random float32 data, each
on its own identically initialized model and `torch.optim.SGD` optimizer:

- ``nonprivate`` and ``bookkeeping``: exactly the chains of `bench.throughput` (non-private SGD; the
  engine's ``BookKeepingClipper.clipped_sum`` → noise → 1/L → ``optimizer.step()``; on a GPU, as the engine runs
  it there, those stages replayed as one CUDA graph: `throughput.graphed_step`);
- ``opacus_<mode>``: ``PrivacyEngine().make_private(..., noise_multiplier=1, max_grad_norm=C,
  grad_sample_mode=<mode>, poisson_sampling=False)`` for mode ``hooks`` (per-layer grad samplers),
  ``functorch`` (``vmap`` per-sample gradients for every layer), ``ew`` (PyTorch's ExpandedWeights) and
  ``ghost`` (ghost clipping: norms without per-sample gradients for nn.Linear, two backward passes;
  other layers, here the CNN's convolutions, fall back to materialized per-sample gradients). A step is
  ``zero_grad`` → forward → loss (``nn.CrossEntropyLoss``, or the ``DPLossFastGradientClipping`` that
  ghost mode returns) → ``backward`` → ``optimizer.step()`` (clip, noise, scale by the expected batch
  size, accounting hook, update). The data loader that ``make_private`` needs is never iterated.

Timing is `bench.timing`'s, as in `bench.throughput`: each ratio measured pair by pair, ``bookkeeping /
nonprivate`` and ``bookkeeping / opacus_<mode>`` for every mode that runs the model, each with its spread and the
±10% self-check; "best Opacus mode" is the one with the smallest ratio (the fastest against the same
book-keeping blocks). Before timing, every Opacus mode runs once per
model with noise 0 on `check_rows` random rows, and its summed clipped gradient is compared with the
engine's (`check_modes`; C is the median per-example norm, so half the examples clip): a mode that
raises is reported as unsupported, and the largest relative deviation goes to the records, so both
sides are seen to do the same work.
"""

import copy
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from bench import throughput
from bench.throughput import CLIP_NORM, LR, NOISE_MULTIPLIER, SEED
from bench.timing import Measured, Timing, measure, rate_record, ratio_record, report_unstable
from engine.training import pick_device
from engine.training.clipping import BookKeepingClipper
from engine.training.models.architectures import build_model

OPACUS_MODES = ("hooks", "functorch", "ew", "ghost")


@dataclass(frozen=True)
class ModelCase:
    label: str
    description: str
    name: str  # build_model's name
    n_features: int
    options: dict[str, object] = field(default_factory=dict)

    def build(self) -> nn.Sequential:
        return build_model(self.name, n_features=self.n_features, n_classes=10, **self.options)


MODELS = (
    ModelCase("logreg", "logreg 784→10", "logreg", 784),
    ModelCase("mlp1000", "MLP 784→1000→10", "mlp", 784, {"hidden": (1000,)}),
    ModelCase("mlp_pca60", "MLP 60→1000→10 (Abadi et al. 2016, after DP-PCA)", "mlp", 60, {"hidden": (1000,)}),
    ModelCase("cnn", "tanh CNN, 1×28×28", "cnn", 784, {"image_shape": (1, 28, 28)}),
)


@dataclass(frozen=True)
class Settings:
    timing: Timing
    batch_sizes: tuple[int, ...]
    check_rows: int = 64  # rows of the random batch for the noise-0 agreement check


FULL = Settings(Timing(block_s=0.5, pairs=11, budget_s=150.0), batch_sizes=(256, 1024))
QUICK = Settings(Timing(block_s=0.3, pairs=11, budget_s=70.0), batch_sizes=(256,))


def random_batch(case: ModelCase, batch: int, device: torch.device) -> tuple[Tensor, Tensor]:
    x = torch.randn(batch, case.n_features, device=device, dtype=torch.float32)
    return x, torch.randint(0, 10, (batch,), device=device)


def make_opacus(
    model: nn.Module, x: Tensor, y: Tensor, mode: str, noise_multiplier: float, clip_norm: float = CLIP_NORM
) -> tuple[nn.Module, torch.optim.Optimizer, Callable[[Tensor, Tensor], Tensor]]:
    """(wrapped module, DP optimizer, criterion) from `make_private`; `model` is wrapped in place.

    The data loader holds the batch (x, y) in one batch of len(x) rows, so Opacus' expected batch size,
    which its "mean" reduction divides the noisy sum by, is len(x)."""
    from opacus import PrivacyEngine  # a benchmark-only dependency

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=len(x))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    noise_generator = torch.Generator(device=x.device).manual_seed(SEED + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "secure mode off", "optimizer lr for DP", …: expected here
        made = PrivacyEngine(accountant="rdp").make_private(
            module=model,
            optimizer=optimizer,
            criterion=nn.CrossEntropyLoss(),
            data_loader=loader,
            noise_multiplier=noise_multiplier,
            max_grad_norm=clip_norm,
            grad_sample_mode=mode,
            poisson_sampling=False,
            noise_generator=noise_generator,
        )
    if mode == "ghost":
        module, dp_optimizer, criterion, _ = made
    else:
        (module, dp_optimizer, _), criterion = made, nn.CrossEntropyLoss()
    return module, dp_optimizer, criterion


def opacus_step(model: nn.Module, x: Tensor, y: Tensor, mode: str) -> Callable[[], None]:
    module, optimizer, criterion = make_opacus(model, x, y, mode, NOISE_MULTIPLIER)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        criterion(module(x), y).backward()
        optimizer.step()

    return step


def engine_step(model: nn.Module, x: Tensor, y: Tensor, device: torch.device) -> Callable[[], None]:
    """The engine's DP-SGD step as it trains on `device`: on a GPU its stages replayed as one CUDA graph
    (`throughput.graphed_step`), else one kernel at a time (`throughput.dp_step`)."""
    if device.type == "cuda":
        return throughput.graphed_step(BookKeepingClipper(model), x, y, device)
    return throughput.dp_step(BookKeepingClipper(model), x, y, device)


def nonprivate_step(model: nn.Module, x: Tensor, y: Tensor) -> Callable[[], None]:
    return throughput.nonprivate_step(model, x, y)


def opacus_clipped_sum(model: nn.Module, x: Tensor, y: Tensor, mode: str, clip_norm: float) -> list[Tensor]:
    """Σᵢ clip(gᵢ) as Opacus computes it (noise 0): its gradient before the update, times the expected batch size."""
    module, optimizer, criterion = make_opacus(model, x, y, mode, 0.0, clip_norm)
    optimizer.zero_grad(set_to_none=True)
    criterion(module(x), y).backward()
    optimizer.pre_step()  # clip, accumulate, add (zero) noise, divide by the expected batch size
    return [p.grad * optimizer.expected_batch_size for p in model.parameters()]


def engine_clipped_sum(base: nn.Module, x: Tensor, y: Tensor) -> tuple[float, list[Tensor]]:
    """(C, Σᵢ clip(gᵢ)) from the engine, with C the median per-example norm so that half the examples clip."""
    clipper = BookKeepingClipper(copy.deepcopy(base))
    clip_norm = float(clipper.clipped_sum(x, y, 1.0).norms.median())
    return clip_norm, clipper.clipped_sum(x, y, clip_norm).grads


def deviation(ours: list[Tensor], theirs: list[Tensor]) -> float:
    """Largest relative deviation ‖a − b‖/‖a‖ over the parameters."""
    return max(float((a - b).norm() / a.norm()) for a, b in zip(ours, theirs, strict=True))


def agreement(base: nn.Module, x: Tensor, y: Tensor, mode: str) -> float:
    """`deviation` of Opacus' clipped sum (noise 0, same weights, same C) from the engine's."""
    clip_norm, ours = engine_clipped_sum(base, x, y)
    return deviation(ours, opacus_clipped_sum(copy.deepcopy(base), x, y, mode, clip_norm))


def check_modes(case: ModelCase, rows: int, device: torch.device) -> tuple[dict[str, float], dict[str, str]]:
    """Per Opacus mode, its `deviation` from the engine on `rows` rows (noise 0), or why it cannot run the model."""
    torch.manual_seed(SEED)
    base = case.build().to(device)
    x, y = random_batch(case, rows, device)
    clip_norm, ours = engine_clipped_sum(base, x, y)
    deviations: dict[str, float] = {}
    unsupported: dict[str, str] = {}
    for mode in OPACUS_MODES:
        try:
            theirs = opacus_clipped_sum(copy.deepcopy(base), x, y, mode, clip_norm)
        except Exception as error:  # an Opacus mode that cannot handle this model
            unsupported[f"opacus_{mode}"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            continue
        deviations[f"opacus_{mode}"] = deviation(ours, theirs)
    return deviations, unsupported


def time_case(
    case: ModelCase, batch: int, opacus_modes: list[str], settings: Settings, device: torch.device
) -> Measured:
    """Every mode's blocks and the ratios book-keeping / non-private and book-keeping / each Opacus mode."""
    torch.manual_seed(SEED)
    base = case.build().to(device)
    x, y = random_batch(case, batch, device)
    steps = {
        "nonprivate": nonprivate_step(copy.deepcopy(base), x, y),
        "bookkeeping": engine_step(copy.deepcopy(base), x, y, device),
    }
    for mode in opacus_modes:
        steps[mode] = opacus_step(copy.deepcopy(base), x, y, mode.removeprefix("opacus_"))
    print(f"[opacus_compare] {case.label} batch={batch} ...", file=sys.stderr, flush=True)
    ratios = [("bookkeeping", "nonprivate")] + [("bookkeeping", mode) for mode in opacus_modes]
    return measure(steps, ratios, settings.timing, device)


def _case_records(case: ModelCase, settings: Settings, device: torch.device) -> list[dict]:
    deviations, unsupported = check_modes(case, settings.check_rows, device)
    records = [
        {
            "name": f"opacus/{case.label}/{mode}/agreement",
            "value": d,
            "unit": "rel. deviation",
            "rows": settings.check_rows,
        }
        for mode, d in deviations.items()
    ]
    for batch in settings.batch_sizes:
        prefix = f"opacus/{case.label}/b{batch}"
        measured = time_case(case, batch, list(deviations), settings, device)
        records += [rate_record(f"{prefix}/{mode}", rates) for mode, rates in measured.rates.items()]
        records.append(
            ratio_record(prefix, "bookkeeping", "nonprivate", measured.ratios[("bookkeeping", "nonprivate")])
        )
        if deviations:
            medians = {m: statistics.median(measured.ratios[("bookkeeping", m)]) for m in deviations}
            best = min(medians, key=medians.__getitem__)  # the fastest Opacus mode: the smallest ratio
            values = measured.ratios[("bookkeeping", best)]
            records.append(ratio_record(prefix, "bookkeeping", best, values, best_opacus=best, unsupported=unsupported))
    return records


def run(
    settings_quick: bool = False, device: torch.device | None = None, settings: Settings | None = None
) -> list[dict]:
    settings = settings or (QUICK if settings_quick else FULL)
    device = device if device is not None else pick_device()
    records: list[dict] = []
    with warnings.catch_warnings():
        # Opacus' hooks on a first layer whose input needs no gradient: expected, harmless
        warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
        for case in MODELS:
            records += _case_records(case, settings, device)
    report_unstable("opacus", records)
    return records


def ratio_cell(record: dict) -> str:
    """ "0.95× ±3%", flagged ⚠ when the self-check finds the pairs disagree by more than ±10%."""
    return f"{record['value']:.2f}× ±{record['spread']:.0%}" + ("" if record["stable"] else " ⚠")


def markdown(records: list[dict]) -> str:
    """One row per (model, batch): steps/s of every mode, then the two ratios."""
    records = [r for r in records if r["name"].startswith("opacus/")]  # other suites' records may be mixed in
    figures = {r["name"]: r for r in records}
    descriptions = {f"opacus/{c.label}/": c.description for c in MODELS}
    prefixes = list(dict.fromkeys(r["name"].rpartition("/")[0] for r in records if r["unit"] == "steps/s"))
    columns = ["nonprivate", "bookkeeping", *(f"opacus_{m}" for m in OPACUS_MODES)]
    head = ["model", "B", *columns, "bk / nonprivate", "bk / best Opacus"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for prefix in prefixes:
        model, _, batch = prefix.rpartition("/b")
        cells = [
            f"{figures[f'{prefix}/{m}']['value']:.3g}" if f"{prefix}/{m}" in figures else "unsupported" for m in columns
        ]
        vs_np = figures.get(f"{prefix}/bookkeeping_vs_nonprivate")
        cells.append(ratio_cell(vs_np) if vs_np else "n/a")
        best = next((r for r in records if r["name"].startswith(prefix + "/") and "best_opacus" in r), None)
        cells.append(f"{ratio_cell(best)} ({best['best_opacus'].removeprefix('opacus_')})" if best else "n/a")
        lines.append(f"| {descriptions.get(model + '/', model)} | {batch} | " + " | ".join(cells) + " |")
    worst = max((r["value"] for r in records if r["unit"] == "rel. deviation"), default=None)
    if worst is not None:
        lines.append(f"\nNoise 0, same weights: Opacus' clipped sums deviate from the engine's by at most {worst:.1e}")
    return "\n".join(lines)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    print(markdown(run(quick)))

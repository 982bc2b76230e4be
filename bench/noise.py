"""Noise suite: what release mode costs per DP-SGD step against the reproducible lab mode.

One engine step (`registry.make_step`: Poisson lot, book-keeping clipping, Gaussian noise drawn a step ahead,
1/L, SGD) of logistic regression and of the MLP 64→128→10 on digits with lots of 256 (q = 256/1,438), on the
CPU at one thread. Release mode seeds a fresh generator from `secrets` for the lot and for every tensor and draws
each noise coordinate as four Gaussians, halved (`engine.training.noise`); the lab mode draws once from streams
seeded by the spec. Timing: `bench.timing`, the one harness of the speed suites (blocks of about 0.5 s, 0.3 s
with ``--quick``; the ratio release / reproducible measured pair by pair, with its spread and the self-check).
"""

import torch

from bench.timing import Timing, measure, rate_record, ratio_record, report_unstable
from engine.training import load_dataset, parse_spec, plan_spec
from engine.training.algorithms.optimizers import OptimizerName, make_optimizer
from engine.training.algorithms.registry import StepContext, make_step
from engine.training.noise import random_streams
from engine.training.run_setup import build_run_model

MODELS = {"logreg": {}, "mlp 64→128→10": {"model": "mlp", "hidden": [128]}}
MODES = ("reproducible", "release")
THREADS = 1
FULL = Timing(block_s=0.5, pairs=15, budget_s=40.0)
QUICK = Timing(block_s=0.3, pairs=11, budget_s=20.0)


def spec_for(model: dict, noise: str):
    return parse_spec(
        {
            "dataset": "digits",
            "model": "logreg",
            "algorithm": "dpsgd",
            "delta": 1e-5,
            "clip_norm": 1.0,
            "noise_multiplier": 1.0,
            "lot_size": 256,
            "epochs": 100,
            "lr": 0.5,
            "seed": 0,
            "noise": noise,
        }
        | model
    )


def stepper(spec, data):
    """The engine's step function for `spec` on the CPU, the plan's steps in order, over and over (the step
    function is made again, on the same streams, whenever the plan's steps run out)."""
    device = torch.device("cpu")
    plan = plan_spec(spec)
    x, y = torch.as_tensor(data.x_train), torch.as_tensor(data.y_train)
    torch.manual_seed(spec.seed)
    model = build_run_model(spec, n_features=x.shape[1], n_classes=data.n_classes, image_shape=data.image_shape)
    optimizer = make_optimizer(OptimizerName(spec.optimizer), list(model.parameters()), lr=spec.lr, momentum=None)
    streams = random_streams(spec, device)
    context = StepContext(spec=spec, plan=plan, model=model, optimizer=optimizer, x=x, y=y, streams=streams)
    state = {"step": plan.steps, "once": None}

    def step() -> None:
        if state["step"] == plan.steps:
            state["once"], state["step"] = make_step(context), 0
        state["step"] += 1
        state["once"](state["step"])

    return step


def run(quick: bool) -> list[dict]:
    timing = QUICK if quick else FULL
    data = load_dataset("digits")
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    records: list[dict] = []
    try:
        for label, model in MODELS.items():
            steps = {mode: stepper(spec_for(model, mode), data) for mode in MODES}
            measured = measure(steps, [("release", "reproducible")], timing, torch.device("cpu"))
            name = f"noise: DP-SGD step, {label}, digits, lots of 256, CPU {THREADS} thread"
            records += [rate_record(f"{name}: {mode} noise", measured.rates[mode]) for mode in MODES]
            records.append(ratio_record(name, "release", "reproducible", measured.ratios[("release", "reproducible")]))
    finally:
        torch.set_num_threads(threads)
    report_unstable("noise", records)
    return records

"""`python -m bench.gpu_check [--out DIR]`: the checks and figures that need a CUDA GPU, in one process sized for a
short device lease (about 6 minutes on an H100): what CI, which has no GPU, cannot run.

Checks (each prints PASS or FAIL with its figure):
- **graph** — `StepGraph` captured and replayed gives what its body gives eagerly on the same lots and noise, and
  what the eager stages give: float64 within the tests' summation bound, float32 reported; a new threshold
  recaptures; a small lot after a large one leaves no earlier row in the padding.
- **stack graph** — `StackStepGraph` of 8 members, captured and replayed, against the eager stacked stages
  (float64, within the summation bound).
- **noise ahead** — `NoiseAhead` on a side stream draws bit for bit the inline draws (`add_gaussian_noise`) from a
  CUDA generator, while the main stream is busy.
- **engine** — `train` on the GPU with the graphed step against the eager stages: the same lot sizes and ε at every
  step, test accuracies side by side, loop times.
- **privacy** — an audited run with a tenth of its claimed noise is caught (its gradient canaries placed by the
  public profile measured on the GPU), and a stack whose members restarted charges the earlier attempt in each
  member's ε and in the joint ε.

Figures: the `throughput` suite (graphed and eager against non-private), the `opacus` suite (the graphed engine
step against every Opacus mode) and the `sweep` suite's stack of 8 against one run (each graphed and eager), with
blocks and repetitions cut to fit the lease (`GPU_TIMING`, `GPU_OPACUS`, `GPU_SWEEP`). Records go to
`DIR/gpu.json` after every section, so a cut-off run still returns what it measured.

Last, the reproduced table's GPU variant (`table`: `bench.table.run(gpu=True)`, its rows in order until
`bench.table.GPU_TIME_CAP_S`, 8 minutes, has passed; each row's record also in `DIR/table/<row>.json`). It is the
longest step: `--skip table` leaves it out, `--only table` runs it alone.
"""

import argparse
import contextlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from bench import audit, opacus_compare, sweep, table, throughput
from bench.timing import Timing
from engine.jobs.settings import default_data_dirs
from engine.training import StackMember, load_dataset, parse_spec, plan_run, plan_spec, train, train_stack
from engine.training.algorithms.dpsgd import clip_and_accumulate
from engine.training.algorithms.dpsgd_graph import StepGraph
from engine.training.clipping import BookKeepingClipper
from engine.training.config.examples import digits_demo_spec
from engine.training.models.architectures import build_model
from engine.training.noise import add_gaussian_noise
from engine.training.noise_ahead import NoiseAhead
from engine.training.trainers.stack import StackedClipper
from engine.training.trainers.stack.clipping import clipped_sum_in_chunks
from engine.training.trainers.stack.stack_graph import StackStepGraph

GPU_TIMING = Timing(block_s=0.2, pairs=5, budget_s=20.0)
GPU_OPACUS = opacus_compare.Settings(Timing(block_s=0.2, pairs=5, budget_s=20.0), batch_sizes=(256, 1024))
GPU_SWEEP = sweep.Settings(
    members=8,
    epochs=2.0,
    repetitions=3,
    models=sweep.GPU_MODELS,
    test_examples=2000,
    modes=("one run", "one run, eager", "stack", "stack, eager"),
)
CASES = [("logreg", {}, 784), ("mlp", {"hidden": (1000,)}, 784), ("cnn", {"image_shape": (1, 28, 28)}, 784)]
U64 = 2.0**-53
ENGINE_SPEC = {"algorithm": "dpsgd", "delta": 1e-5, "lot_size": 256, "epochs": 2.0, "lr": 0.5, "seed": 0}
ENGINE_SPEC |= {"noise_multiplier": 1.0, "clip_norm": 1.0}
ENGINE_RUNS = [("digits", "mlp", {"hidden": [128]}), ("mnist", "logreg", {}), ("mnist", "mlp", {"hidden": [1000]})]


def check(name: str, passed: bool, detail: str) -> dict:
    print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}", flush=True)
    return {"name": f"check/{name}", "value": float(passed), "unit": "pass", "compared": detail}


def graph_checks(device: torch.device) -> list[dict]:
    records = []
    for model_name, options, n_features in CASES:
        for dtype in (torch.float64, torch.float32):
            torch.manual_seed(0)
            model = build_model(model_name, n_features=n_features, n_classes=10, **options).to(device, dtype)
            x = torch.randn(600, n_features, device=device, dtype=dtype)
            y = torch.randint(0, 10, (600,), device=device)
            captured = StepGraph(BookKeepingClipper(model), x, y, capacity=328, inv_lot=1 / 256)
            eager_body = StepGraph(BookKeepingClipper(model), x, y, capacity=328, inv_lot=1 / 256)
            eager_body.replayed.capture = False
            worst_body, worst_stages = 0.0, 0.0
            generator = torch.Generator(device=device).manual_seed(1)
            for size, clip in ((300, 1.0), (40, 1.0), (256, 0.5)):
                lot = torch.randperm(600, device=device, generator=generator)[:size]
                noise = [torch.randn(p.shape, device=device, dtype=dtype) for p in captured.clipper.params]
                got = captured.run(x, y, lot, clip, noise)
                got = [g.clone() for g in got.grads]
                body = eager_body.run(x, y, lot, clip, noise).grads
                stages = clip_and_accumulate(captured.clipper, x[lot], y[lot], clip, None)
                expected = [(g + n) / 256 for g, n in zip(stages.grads, noise, strict=True)]
                worst_body = max(worst_body, max(float((a - b).abs().max()) for a, b in zip(got, body, strict=True)))
                worst_stages = max(
                    worst_stages, max(float((a - b).abs().max()) for a, b in zip(got, expected, strict=True))
                )
            bound = (2 * 328 * U64 / (1 - 328 * U64) * 328 + 4 * U64 * (328 + 10)) / 256
            label = f"graph {model_name} {str(dtype).removeprefix('torch.')}"
            detail = (
                f"replay vs eager body {worst_body:.2e}, vs eager stages {worst_stages:.2e}; "
                f"captures {captured.replayed.captures} (thresholds 1.0, 0.5)"
            )
            if dtype == torch.float64:
                passed = worst_stages <= bound and worst_body <= bound and captured.replayed.captures == 2
                records.append(check(label, passed, detail + f"; float64 bound {bound:.1e}"))
            else:
                records.append(check(label, captured.replayed.captures == 2 and worst_stages < 1e-4, detail))
    return records


def stack_graph_checks(device: torch.device) -> list[dict]:
    records = []
    for model_name, options, n_features in CASES:
        models = []
        for seed in range(8):
            torch.manual_seed(seed)
            models.append(build_model(model_name, n_features=n_features, n_classes=10, **options).to(device).double())
        clipper = StackedClipper(models)
        x = torch.randn(600, n_features, device=device, dtype=torch.float64)
        y = torch.randint(0, 10, (600,), device=device)
        graph = StackStepGraph(clipper, x, y, capacity=328, per_member=False, inv_lot=1 / 256)
        clip_norms = [0.5 + 0.25 * k for k in range(8)]
        worst = 0.0
        for size in (300, 40, 256):
            lot = torch.randperm(600, device=device)[:size]
            noise = [[torch.randn_like(clipper.params[n][0]) for n in clipper.names] for _ in range(8)]
            got = {n: g.clone() for n, g in graph.run(x, y, lot, clip_norms, noise).grads.items()}
            eager = clipped_sum_in_chunks(clipper, x[lot], y[lot], clip_norms, None, per_member=False)
            for i, n in enumerate(clipper.names):
                expected = (eager.grads[n] + torch.stack([noise[k][i] for k in range(8)])) / 256
                worst = max(worst, float((got[n] - expected).abs().max()))
        bound = (2 * 328 * U64 / (1 - 328 * U64) * 328 * 2.25 + 4 * U64 * (328 * 2.25 + 10)) / 256
        captures = graph.replayed.captures
        detail = f"8 members, float64: replay vs eager stages {worst:.2e} (bound {bound:.1e}); captures {captures}"
        records.append(check(f"stack graph {model_name}", worst <= bound and captures == 1, detail))
    return records


def noise_ahead_check(device: torch.device) -> list[dict]:
    like = [
        torch.zeros(1000, 800, device=device),
        torch.zeros(1000, device=device),
        torch.zeros(10, 1000, device=device),
    ]
    ahead = NoiseAhead(
        like, lambda step: 0.5 + step, torch.Generator(device=device).manual_seed(7), last_step=6, ahead_from=0
    )
    inline = torch.Generator(device=device).manual_seed(7)
    busy = torch.randn(4096, 4096, device=device)
    equal, side = True, ahead.side_stream is not None
    for step in range(1, 7):
        for _ in range(3):
            busy = busy @ busy / 64  # keep the main stream busy while the next step's noise is drawn on the side
        grads = [torch.full_like(t, float(step)) for t in like]
        expected = add_gaussian_noise([g.clone() for g in grads], 0.5 + step, inline)
        got = ahead.add_to(grads, step)
        equal &= all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    torch.cuda.synchronize(device)
    return [check("noise ahead on a side stream", equal and side, f"side stream {side}; 6 steps bitwise equal {equal}")]


def engine_check(device: torch.device) -> list[dict]:
    records = []
    for dataset, model, extra in ENGINE_RUNS:
        spec = parse_spec({**ENGINE_SPEC, "dataset": dataset, "model": model, **extra})
        try:
            data = load_dataset(dataset, default_data_dirs())
        except Exception as error:  # no MNIST copy
            print(f"skip engine {dataset}: {error}", flush=True)
            continue
        plan = plan_run(spec, n_train=len(data.x_train))
        runs = {}
        for mode in ("warm-up", "eager", "graphed"):  # the first run pays CUDA's first-use costs
            seen: list = []
            with contextlib.nullcontext() if mode != "eager" else sweep.eager_steps():
                result = train(spec, plan=plan, dataset=data, on_step=seen.append, device=device)
            runs[mode] = (seen, result)
        (g, g_result), (e, e_result) = runs["graphed"], runs["eager"]
        same_lots = [r.lot_size for r in g] == [r.lot_size for r in e]
        same_eps = [r.epsilon for r in g] == [r.epsilon for r in e]
        detail = (
            f"{len(g) - 1} steps; lot sizes equal {same_lots}, ε equal {same_eps} (ε {g_result.epsilon:.3f}); "
            f"test accuracy graphed {g_result.test_accuracy:.4f} vs eager {e_result.test_accuracy:.4f}; "
            f"loop {g[-1].elapsed_s:.2f} s graphed vs {e[-1].elapsed_s:.2f} s eager"
        )
        records.append(check(f"engine {dataset} {model}", same_lots and same_eps, detail))
        records.append({"name": f"engine/{dataset}/{model}/loop_graphed", "value": g[-1].elapsed_s, "unit": "s"})
        records.append({"name": f"engine/{dataset}/{model}/loop_eager", "value": e[-1].elapsed_s, "unit": "s"})
    return records


def privacy_checks(device: torch.device) -> list[dict]:
    """On the GPU: an audit catches a run with a tenth of its claimed noise (its canaries placed by a profile
    measured on the device), and a restarted stack charges its earlier attempt in each member's ε and its joint ε."""
    data = load_dataset("digits")
    spec = parse_spec(digits_demo_spec(target_epsilon=1.0, audit={"canaries": 500, "kind": "gradient"}))
    with audit.noise_cut(0.1):
        caught = train(spec, plan=plan_spec(spec), dataset=data, device=device)
    records = [
        check(
            "audit catches a tenth of the noise",
            caught.audit["epsilon"] > caught.epsilon,
            f"claimed ε {caught.epsilon:.3f}, audited ε̂ {caught.audit['epsilon']:.3f} (ceiling "
            f"{caught.audit['ceiling']:.3f})",
        )
    ]
    members = []
    for sigma in (1.0, 2.0):
        raw = digits_demo_spec(noise_multiplier=sigma, noise="release", epochs=2)
        member = parse_spec({k: v for k, v in raw.items() if k != "target_epsilon"})
        members.append(StackMember(spec=member, plan=replace(plan_spec(member), earlier_attempts=(30,))))
    restarted = train_stack(members, dataset=data, device=device)
    alone = train_stack([replace(m, plan=replace(m.plan, earlier_attempts=())) for m in members], dataset=data)
    charged = all(r.epsilon > r.restart["epsilon_this_attempt"] for r in restarted)
    joint, joint_alone = restarted[0].stack["joint_epsilon"], alone[0].stack["joint_epsilon"]
    records.append(
        check(
            "restarted stack charged",
            charged and joint > joint_alone,
            f"members' ε {[round(r.epsilon, 3) for r in restarted]} over this attempt's "
            f"{[round(r.restart['epsilon_this_attempt'], 3) for r in restarted]}; joint ε {joint:.3f} over "
            f"{joint_alone:.3f}",
        )
    )
    return records


def table_step(out: Path) -> list[dict]:
    """The reproduced table's GPU rows, within its time cap, each row's record also written to `out/table/`."""
    records = table.run(gpu=True, time_cap_s=table.GPU_TIME_CAP_S)
    table.write_records(records, out / "table")
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for gpu.json")
    parser.add_argument("--skip", action="append", default=[], help="a section to leave out (repeatable)")
    parser.add_argument("--only", action="append", default=[], help="run only this section (repeatable)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name(device)} | torch {torch.__version__}", flush=True)
    sections: list[tuple[str, Callable[[], list[dict]]]] = [
        ("graph", lambda: graph_checks(device)),
        ("stack_graph", lambda: stack_graph_checks(device)),
        ("noise_ahead", lambda: noise_ahead_check(device)),
        ("engine", lambda: engine_check(device)),
        ("privacy", lambda: privacy_checks(device)),
        ("throughput", lambda: throughput.run(timing=GPU_TIMING)),
        ("sweep", lambda: sweep.run(False, settings=GPU_SWEEP)),
        ("opacus", lambda: opacus_compare.run(device=device, settings=GPU_OPACUS)),
        ("table", lambda: table_step(args.out)),
    ]
    records: list[dict] = []
    for name, section in sections:
        if name in args.skip or (args.only and name not in args.only):
            continue
        started = time.perf_counter()
        try:
            records += section()
        except Exception:
            traceback.print_exc()
            records.append({"name": f"section/{name}", "value": 0.0, "unit": "failed"})
        print(f"[{name}] {time.perf_counter() - started:.1f} s", flush=True)
        (args.out / "gpu.json").write_text(json.dumps(records, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

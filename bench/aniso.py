"""Anisotropic vs isotropic DP-SGD at equal ε (Xiang et al.): `python -m bench --suite aniso [--quick]`.

Each setting is trained three ways from one spec that differs only in `algorithm` (and granularity), so
the plan, σ, the ε of the ledger, the DP-PCA projection, the Poisson lots and the model's initialization
are shared: DP-SGD (isotropic), and aniso_dpsgd per layer and per coordinate (`engine.training.algorithms.aniso`,
default smoothing 0.9 and ratio 10). The figures are test accuracies and the paired differences
aniso − iso per seed; the summary table on stderr shows them side by side.

Settings, swept one factor at a time around a centre as Abadi et al. 2016 (§5.2) do:

- MNIST, DP-PCA 60 (σ_p = 7) + ReLU MLP, ε = 2, δ = 1e-5, lr 0.1; centre L = 600, 1000 hidden units,
  C = 4 (theirs); lots 300 / 1200, 200 hidden units, C = 2 / 8. Trained for `MNIST_EPOCHS` epochs
  (Abadi et al. train hundreds: this fits a 2-core CPU; σ is calibrated for these epochs).
- Adult, logistic regression, ε = 1, δ = 1e-6, lr 1 (the utility suite's preset); centre L = 256, C = 1;
  L = 1024, C = 0.3 / 3. A model of one layer has the single layer weight 1, so "layer" *is* DP-SGD
  there (bit for bit) and only "coordinate" is trained.

`--quick`: the two centres only, one seed, one epoch on MNIST (~1.5 min). The full suite (60 runs) took
~10 min at `--threads 1` on the 2-core development machine, where that is faster than torch's default.
Runs on a dataset without a local copy (`DPLAB_DATA_DIR`) are skipped.
"""

import statistics
import sys
from dataclasses import dataclass

from bench.utility import Datasets
from engine.training import TrainResult, parse_spec, plan_run
from engine.training import train as train_spec

MNIST_EPOCHS = 2
MNIST_CENTRE = {
    "dataset": "mnist",
    "model": "mlp",
    "hidden": [1000],
    "pca_dims": 60,
    "pca_noise": 7.0,
    "delta": 1e-5,
    "target_epsilon": 2.0,
    "clip_norm": 4.0,
    "lot_size": 600,
    "lr": 0.1,
    "epochs": MNIST_EPOCHS,
}
ADULT_CENTRE = {
    "dataset": "adult",
    "model": "logreg",
    "delta": 1e-6,
    "target_epsilon": 1.0,
    "clip_norm": 1.0,
    "lot_size": 256,
    "lr": 1.0,
    "epochs": 5,
}
MNIST_SWEEP = ({}, {"lot_size": 300}, {"lot_size": 1200}, {"hidden": [200]}, {"clip_norm": 2.0}, {"clip_norm": 8.0})
ADULT_SWEEP = ({}, {"lot_size": 1024}, {"clip_norm": 0.3}, {"clip_norm": 3.0})
# With the centre's 2.0: the ε grid of this suite, seed 0, with Abadi et al.'s DP-PCA noise for each budget (σ_p 7 alone
# costs more than ε 0.5).
MNIST_EPSILONS = {0.5: 16.0, 1.0: 16.0, 4.0: 4.0, 8.0: 4.0}  # target ε → σ_p
SEEDS = (0, 1)
ADULT_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Setting:
    name: str
    spec: dict
    methods: tuple[str, ...]  # "iso", "layer", "coordinate"
    seeds: tuple[int, ...]


METHOD_SPEC = {
    "iso": {"algorithm": "dpsgd"},
    "layer": {"algorithm": "aniso_dpsgd", "aniso_granularity": "layer"},
    "coordinate": {"algorithm": "aniso_dpsgd", "aniso_granularity": "coordinate"},
}


def _name(spec: dict) -> str:
    if spec["dataset"] == "mnist":
        at = "" if spec["target_epsilon"] == MNIST_CENTRE["target_epsilon"] else f"_eps{spec['target_epsilon']:g}"
        return f"mnist_pca60_mlp{spec['hidden'][0]}_L{spec['lot_size']}_C{spec['clip_norm']:g}{at}"
    return f"adult_logreg_L{spec['lot_size']}_C{spec['clip_norm']:g}"


def settings(quick: bool) -> list[Setting]:
    mnist = [{**MNIST_CENTRE, **change} for change in (MNIST_SWEEP[:1] if quick else MNIST_SWEEP)]
    if quick:
        mnist = [{**s, "epochs": 1} for s in mnist]
    adult = [{**ADULT_CENTRE, **change} for change in (ADULT_SWEEP[:1] if quick else ADULT_SWEEP)]
    return [
        *(Setting(_name(s), s, ("iso", "layer", "coordinate"), SEEDS[:1] if quick else SEEDS) for s in mnist),
        *(Setting(_name(s), s, ("iso", "coordinate"), ADULT_SEEDS[:1] if quick else ADULT_SEEDS) for s in adult),
        *([] if quick else epsilon_settings()),
    ]


def epsilon_settings() -> list[Setting]:
    """The MNIST centre at the other target ε of this suite's grid, one seed."""
    specs = [
        {**MNIST_CENTRE, "target_epsilon": eps, "pca_noise": pca_noise} for eps, pca_noise in MNIST_EPSILONS.items()
    ]
    return [Setting(_name(s), s, ("iso", "layer", "coordinate"), SEEDS[:1]) for s in specs]


def run(quick: bool = False) -> list[dict]:
    datasets = Datasets()
    records: list[dict] = []
    rows: list[dict] = []
    for setting in settings(quick):
        data = datasets.get(setting.spec["dataset"])
        if data is None:
            continue
        accuracy: dict[str, list[float]] = {m: [] for m in setting.methods}
        epsilon, sigma, seconds = None, None, {m: 0.0 for m in setting.methods}
        for seed in setting.seeds:
            for method in setting.methods:
                spec = parse_spec({**setting.spec, **METHOD_SPEC[method], "seed": seed})
                plan = plan_run(spec, n_train=len(data.x_train), sigma_hint=sigma)
                if sigma is not None and plan.noise_multiplier != sigma:
                    raise AssertionError(f"{setting.name}: {method} planned σ = {plan.noise_multiplier}, not {sigma}")
                result: TrainResult = train_spec(spec, data_dirs=datasets.dirs, dataset=data, plan=plan)
                accuracy[method].append(result.test_accuracy)
                seconds[method] += result.seconds
                epsilon, sigma = result.epsilon, result.noise_multiplier
                print(
                    f"bench aniso: {setting.name} seed {seed} {method}: accuracy {result.test_accuracy:.4f}, "
                    f"ε {result.epsilon:.3f}, {result.seconds:.1f} s",
                    file=sys.stderr,
                )
        prefix = f"aniso/{setting.name}"
        common = {"epsilon": epsilon, "noise_multiplier": sigma, "seeds": list(setting.seeds), "spec": setting.spec}
        for method in setting.methods:
            records.append(
                {
                    "name": f"{prefix}/{method}/test_accuracy",
                    "value": statistics.mean(accuracy[method]),
                    "unit": "accuracy",
                    "per_seed": accuracy[method],
                    "seconds": seconds[method],
                    **common,
                }
            )
        row = {
            "setting": setting.name,
            "epsilon": epsilon,
            "sigma": sigma,
            "iso": accuracy["iso"],
            "seeds": setting.seeds,
        }
        for method in setting.methods[1:]:
            differences = [a - b for a, b in zip(accuracy[method], accuracy["iso"], strict=True)]
            row[method] = differences
            records.append(
                {
                    "name": f"{prefix}/{method}_minus_iso",
                    "value": statistics.mean(differences),
                    "unit": "accuracy (aniso − iso)",
                    "per_seed": differences,
                    **common,
                }
            )
        rows.append(row)
    print(summary_table(rows), file=sys.stderr)
    return records


def _cell(values: list[float] | None, signed: bool = False) -> str:
    if values is None:
        return "= iso (one layer)"
    fmt = "{:+.4f}" if signed else "{:.4f}"
    mean = fmt.format(statistics.mean(values))
    return mean if len(values) == 1 else f"{mean} ({', '.join(fmt.format(v) for v in values)})"


def summary_table(rows: list[dict]) -> str:
    lines = [
        "anisotropic vs isotropic DP-SGD at equal ε (same plan, σ, lots and initialization per seed); "
        "mean test accuracy (per seed):",
        "| setting | ε | σ | seeds | iso accuracy | layer − iso | coordinate − iso |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        differences = (_cell(r.get("layer"), signed=True), _cell(r.get("coordinate"), signed=True))
        cells = (
            r["setting"],
            f"{r['epsilon']:.3f}",
            f"{r['sigma']:.3f}",
            ",".join(map(str, r["seeds"])),
            _cell(r["iso"]),
            *differences,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

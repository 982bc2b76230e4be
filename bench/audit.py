"""Audit suite: the one-run audit's lower bound ε̂ against the reported ε, whether it catches a run with a tenth of
its claimed noise, and what an audit costs in time.

For the digits preset (logistic regression), MNIST logistic regression and the MNIST CNN, at target ε ∈ {1, 2, 4,
8, 50}, with gradient canaries (white-box, placed where the public test split's gradient is smallest) and input
canaries (black-box): `REPEATS` audited runs each (`spec.audit`, every one with fresh memberships; the CNN one),
their reported ε (the tightest accountant), ε̂ at 95% (median, least and most) and the ceiling the canaries
could reach. Then the catch rate: `CATCH_AUDITS` audited runs, gradient canaries, whose noise is cut to a tenth
while their plan still claims ε ∈ `CATCH_EPSILONS` (a bug of the kind an audit exists to find, injected here
only); a run is caught when ε̂ exceeds its reported ε.

Steinke, Nasr & Jagielski (2023) audit DP-SGD on CIFAR-10 with white-box gradient canaries too; their figures are
not quoted beside these (the text of their paper this suite was written with did not reach its results), and
their setting differs (a WideResNet, canaries inserted every step, other m).

The time an audit adds is an audited run's wall time over the same spec's unaudited run's, trained one after the
other in one process (after a throw-away run that pays the process's one-off costs and one that fills the
accountants' caches for that ε, which the final ε of both runs then reads; the dataset loaded once). MNIST and
the CNN are skipped when MNIST's files are not here (`DPLAB_DATA_DIR`); `--quick` leaves the CNN out (2.5 min a
run on a 2-core CPU) and MNIST's catch rate.

Canaries: gradient canaries take one model coordinate each (digits' logistic regression has 650: 500 canaries, and
100 in a second case, which fit its quiet coordinates better; digits' MLP with 64 hidden units, whose first layer
has a weight per pixel and unit, 500); MNIST's models take 1,000 of either kind, digits 500 input canaries. Beside
every gradient-canary figure, the **noise-only optimum** (`noise_only_optimum`): the ε̂ of simulated audits at the
same q, steps, σ and m in which the data adds nothing at the canaries' coordinates, what any placement could reach
with this scoring.
"""

import contextlib
import secrets
import statistics
import sys
import time
from collections.abc import Iterator

import numpy as np

import engine.training.algorithms.dpsgd as dpsgd
from engine.jobs.settings import default_data_dirs
from engine.privacy.auditing import audit_scores, sampled_shift_log_ratio
from engine.training import DATASETS, Dataset, load_dataset, parse_spec, plan_spec, train
from engine.training.config.examples import digits_demo_spec

EPSILONS = (1.0, 2.0, 4.0, 8.0, 50.0)
KINDS = ("gradient", "input")
REPEATS = 3  # audited runs per case, ε and kind (the CNN: 1)
CATCH_EPSILONS = (1.0, 2.0)  # the claims a run with a tenth of their noise makes
CATCH_AUDITS = 10
CASES = {  # name: (base spec, canaries, kinds)
    "digits logreg": (digits_demo_spec(), 500, KINDS),
    "digits logreg, 100 canaries": (digits_demo_spec(), 100, ("gradient",)),
    "digits mlp": (digits_demo_spec(model="mlp", hidden=[64], lr=0.5), 500, ("gradient",)),
    "mnist logreg": (digits_demo_spec(dataset="mnist", lot_size=256, lr=1.0, epochs=5), 1000, KINDS),
    "mnist cnn": (digits_demo_spec(dataset="mnist", model="cnn", lot_size=256, lr=1.0, epochs=1), 1000, KINDS),
}
NOISE_ONLY_REPEATS = 5  # simulated audits per case and ε of the noise-only optimum


def timed(raw: dict, dataset: Dataset):
    """Train `raw`, timed from after planning (σ's calibration, cached for the second spec of a pair) to the end."""
    spec = parse_spec(raw)
    plan = plan_spec(spec)
    started = time.perf_counter()
    result = train(spec, dataset=dataset, plan=plan)
    return result, time.perf_counter() - started


@contextlib.contextmanager
def noise_cut(factor: float) -> Iterator[None]:
    """Inside: every DP-SGD step draws `factor` times its planned noise, while the plan and the reported ε stay."""
    honest = dpsgd.noise_std
    dpsgd.noise_std = lambda plan, step: honest(plan, step) * factor  # DP-SGD's step and its noise drawn ahead
    try:
        yield
    finally:
        dpsgd.noise_std = honest


def noise_only_optimum(raw: dict, canaries: int, repeats: int = NOISE_ONLY_REPEATS) -> list[float]:
    """ε̂ of simulated audits in which the data adds nothing at any canary's coordinate: each canary's release at
    each step is its Poisson-sampled unit shift plus N(0, σₜ²) alone, scored as the gradient canaries score it
    (`sampled_shift_log_ratio`), for the plan of `raw` (its q, steps and σ at each step). What placement could
    reach at best, since the data's gradient only adds to the noise; the gap to it is the data's."""
    plan = plan_spec(parse_spec(raw))
    rng = np.random.default_rng(secrets.randbits(64))
    found = []
    for _ in range(repeats):
        inside = rng.random(canaries) < 0.5
        scores = np.zeros(canaries)
        for step in range(1, plan.steps + 1):
            sigma = plan.noise_multiplier_at(step)
            release = rng.normal(0.0, sigma, canaries) + inside * (rng.random(canaries) < plan.sampling_rate)
            scores += sampled_shift_log_ratio(release, variance=sigma**2, rate=plan.sampling_rate)
        found.append(audit_scores(scores, inside, delta=plan.delta).epsilon)
    return sorted(found)


def audits(
    name: str, base: dict, canaries: int, dataset: Dataset, epsilon: float, repeats: int, kinds=KINDS
) -> list[dict]:
    """One case at one ε: an unaudited run, then `repeats` audited runs of each kind, as records (gradient
    canaries beside their noise-only optimum)."""
    timed(base | {"target_epsilon": epsilon}, dataset)  # fills the accountants' caches, which all then share
    plain, plain_s = timed(base | {"target_epsilon": epsilon}, dataset)
    records = []
    for kind in kinds:
        runs = [
            timed(base | {"target_epsilon": epsilon, "audit": {"canaries": canaries, "kind": kind}}, dataset)
            for _ in range(repeats)
        ]
        found = sorted(result.audit["epsilon"] for result, _ in runs)
        result, seconds = runs[0][0], statistics.median(s for _, s in runs)
        audit = result.audit
        optimum = noise_only_optimum(base | {"target_epsilon": epsilon}, canaries) if kind == "gradient" else None
        print(
            f"  {name}, ε = {epsilon:g}, {kind}: reported {result.epsilon:.3f}, audited ≥ "
            f"{' · '.join(f'{e:.3f}' for e in found)} (ceiling {audit['ceiling']:.3f}"
            + (f"; noise only {' · '.join(f'{e:.2f}' for e in optimum)}" if optimum else "")
            + f"), {seconds:.1f} s against {plain_s:.1f} s",
            file=sys.stderr,
        )
        records.append(
            {
                "name": f"audit/{name.replace(' ', '_')}/eps_{epsilon:g}/{kind}",
                "value": statistics.median(found),
                "unit": "ε̂ (95%), median",
                "audited_epsilons": found,
                "reported_epsilon": result.epsilon,
                "ceiling": audit["ceiling"],
                "noise_only_optimum": optimum,
                "canaries": audit["canaries"],
                "test_accuracy": result.test_accuracy,
                "unaudited_test_accuracy": plain.test_accuracy,
                "time_ratio": seconds / plain_s,
                "compared": f"reported ε {result.epsilon:.3f}; ε̂ {found[0]:.3f}–{found[-1]:.3f} of "
                f"{len(found)}; ceiling {audit['ceiling']:.3f}; time ×{seconds / plain_s:.2f}",
            }
        )
    return records


def catch_rate(name: str, base: dict, canaries: int, dataset: Dataset, epsilon: float) -> dict:
    """`CATCH_AUDITS` audited runs with a tenth of the noise their plan claims: how many show ε̂ above the claim."""
    raw = base | {"target_epsilon": epsilon, "audit": {"canaries": canaries, "kind": "gradient"}}
    with noise_cut(0.1):
        results = [timed(raw, dataset)[0] for _ in range(CATCH_AUDITS)]
    found = sorted(r.audit["epsilon"] for r in results)
    caught = sum(r.audit["epsilon"] > r.epsilon for r in results)
    claimed = results[0].epsilon
    print(
        f"  {name}, a tenth of the noise of ε = {epsilon:g} (reported {claimed:.3f}): caught {caught} of "
        f"{len(results)}, ε̂ {found[0]:.3f}–{found[-1]:.3f} (median {statistics.median(found):.3f})",
        file=sys.stderr,
    )
    return {
        "name": f"audit/{name.replace(' ', '_')}/tenth_noise/eps_{epsilon:g}",
        "value": caught,
        "unit": f"caught of {len(results)}",
        "audited_epsilons": found,
        "reported_epsilon": claimed,
        "ceiling": results[0].audit["ceiling"],
        "compared": f"claimed ε {claimed:.3f}; ε̂ {found[0]:.3f}–{found[-1]:.3f}, median {statistics.median(found):.3f}",
    }


def run(quick: bool = False) -> list[dict]:
    records = []
    mnist_here = not DATASETS["mnist"].missing_files(default_data_dirs())
    for name, (base, canaries, kinds) in CASES.items():
        if name.startswith("mnist") and not mnist_here:
            print(f"skipping {name}: no MNIST files here", file=sys.stderr)
            continue
        if name == "mnist cnn" and quick:
            print(f"skipping {name}: --quick", file=sys.stderr)
            continue
        dataset = load_dataset(base["dataset"], default_data_dirs())  # loaded once: not part of either time
        timed(base | {"epochs": 0.1}, dataset)  # the first run of a process pays one-off costs: not timed
        repeats = 1 if name == "mnist cnn" else REPEATS
        for epsilon in EPSILONS:
            records += audits(name, base, canaries, dataset, epsilon, repeats, kinds)
        if name == "digits logreg" or (name == "mnist logreg" and not quick):
            records += [catch_rate(name, base, canaries, dataset, epsilon) for epsilon in CATCH_EPSILONS]
    return records

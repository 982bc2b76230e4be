"""Audit suite: the one-run audit's lower bound ε̂ against the reported ε, and what an audit costs in time.

For the digits preset (logistic regression), MNIST logistic regression and the MNIST CNN, at target ε ∈ {1, 3, 8},
with gradient canaries (white-box) and input canaries (black-box): one audited run each (`spec.audit`), its
reported ε (the tightest accountant), its ε̂ at 95% and the ceiling its canaries could reach. The time an audit
adds is the audited run's wall time over the same spec's unaudited run's, trained one after the other in one
process (after a throw-away run that pays the process's one-off costs and one that fills the accountants' caches
for that ε, which the final ε of both runs then reads; the dataset loaded once). MNIST and
the CNN are skipped when MNIST's files are not here (`DPLAB_DATA_DIR`); `--quick` leaves the CNN out (2.5 min a
run on a 2-core CPU).

Canaries: gradient canaries take one model coordinate each (digits' logistic regression has 650: 500 canaries);
MNIST's models take 1,000 of either kind, digits 500 input canaries.
"""

import sys
import time

from engine.jobs.settings import default_data_dirs
from engine.training import DATASETS, Dataset, load_dataset, parse_spec, plan_spec, train
from engine.training.config.examples import digits_demo_spec

EPSILONS = (1.0, 3.0, 8.0)
KINDS = ("gradient", "input")
CASES = {  # name: (base spec, canaries)
    "digits logreg": (digits_demo_spec(), 500),
    "mnist logreg": (digits_demo_spec(dataset="mnist", lot_size=256, lr=1.0, epochs=5), 1000),
    "mnist cnn": (digits_demo_spec(dataset="mnist", model="cnn", lot_size=256, lr=1.0, epochs=1), 1000),
}


def timed(raw: dict, dataset: Dataset):
    """Train `raw`, timed from after planning (σ's calibration, cached for the second spec of a pair) to the end."""
    spec = parse_spec(raw)
    plan = plan_spec(spec)
    started = time.perf_counter()
    result = train(spec, dataset=dataset, plan=plan)
    return result, time.perf_counter() - started


def run(quick: bool = False) -> list[dict]:
    records = []
    mnist_here = not DATASETS["mnist"].missing_files(default_data_dirs())
    for name, (base, canaries) in CASES.items():
        if name != "digits logreg" and not mnist_here:
            print(f"skipping {name}: no MNIST files here", file=sys.stderr)
            continue
        if name == "mnist cnn" and quick:
            print(f"skipping {name}: --quick", file=sys.stderr)
            continue
        dataset = load_dataset(base["dataset"], default_data_dirs())  # loaded once: not part of either time
        timed(base | {"epochs": 0.1}, dataset)  # the first run of a process pays one-off costs: not timed
        for epsilon in EPSILONS:
            timed(base | {"target_epsilon": epsilon}, dataset)  # fills the accountants' caches, which both then share
            plain, plain_s = timed(base | {"target_epsilon": epsilon}, dataset)
            for kind in KINDS:
                audit_option = {"canaries": canaries, "kind": kind}
                result, seconds = timed(base | {"target_epsilon": epsilon, "audit": audit_option}, dataset)
                audit = result.audit
                print(
                    f"  {name}, ε = {epsilon:g}, {kind}: reported {result.epsilon:.3f}, "
                    f"audited ≥ {audit['epsilon']:.3f} "
                    f"(ceiling {audit['ceiling']:.3f}, {audit['correct']}/{audit['guesses']}), {seconds:.1f} s "
                    f"against {plain_s:.1f} s",
                    file=sys.stderr,
                )
                records.append(
                    {
                        "name": f"audit/{name.replace(' ', '_')}/eps_{epsilon:g}/{kind}",
                        "value": audit["epsilon"],
                        "unit": "ε̂ (95%)",
                        "reported_epsilon": result.epsilon,
                        "ceiling": audit["ceiling"],
                        "canaries": audit["canaries"],
                        "correct": audit["correct"],
                        "guesses": audit["guesses"],
                        "test_accuracy": result.test_accuracy,
                        "unaudited_test_accuracy": plain.test_accuracy,
                        "time_ratio": seconds / plain_s,
                        "compared": f"reported ε {result.epsilon:.3f}; time ×{seconds / plain_s:.2f}",
                    }
                )
    return records

"""What leaves the lab in an export: the values a run releases, and the private diagnostics that stay
unless the user asks for them.

A run's per-step metrics are of two kinds. Released (public) values: ε by step (`epsilon`, the RDP
curve, and `epsilon_<accountant>`), accuracy and loss on the held-out test set, the epoch, and the
regret bound of the online learners (a theorem's formula of public parameters). Private diagnostics,
computed on the private training data, which no ε covers (the dashboard shows them labelled "computed on
private data, not released"): the loss and accuracy on each step's lot, the realized lot size, the
share of the lot clipped, the quantiles of its per-example gradient norms, the online learners'
realized regret (private and non-private), and each step's wall time (which follows the realized
Poisson lot size).

A run's own timings follow the same lot sizes (noisy GD does one full pass a step, so its duration tracks N):
the result's `seconds` (and any field named like a duration or rate) is a private diagnostic, and a default
export floors every timestamp of a run (created, started, finished, each status event) and of a sweep to the
UTC day (`day_of`), which keeps their order. With the opt-in they travel exact.

An export keeps only the released metrics unless the user opts in (`include_private_diagnostics`); a
metric name `engine.metric_names` does not know as released is treated as private. The error text of a run on an
uploaded CSV (and its status history's details) may quote a cell of the private file, so it is withheld likewise. A
run's result is kept, less any field named like a private diagnostic, wherever it is nested (of the trainer's
result, `seconds` alone; the names are the guard against a new one). Since a default export may leave
`seconds` out, an imported result need not have it (`engine.jobs.run_schema`).
"""

from collections.abc import Mapping
from typing import Any

from engine.metric_names import PRIVATE_DIAGNOSTICS
from engine.training.datasets import CSV_PREFIX

# Parts of a result field's name that mark it as a private diagnostic (a final training loss, a summary of
# gradient norms, ...), besides the exact names above.
PRIVATE_RESULT_STEMS = (
    "train_loss",
    "train_accuracy",
    "lot_accuracy",
    "grad_norm",
    "clip_fraction",
    "regret_nonprivate",
    "seconds",  # the run's wall time (`TrainResult.seconds`): it follows the realized lot sizes
    "per_second",  # a rate of steps or examples: the same
    "elapsed",
)
DAY_S = 86_400  # a default export's timestamps are floored to the UTC day
DIAGNOSTICS_NOTE = {
    False: (
        "Per-step metrics hold only released values: epsilon by step for each accountant, accuracy and loss on "
        "the held-out test set, and the epoch. Diagnostics computed on the private training data (which no "
        "epsilon covers) were left out, and so were the error texts of failed runs on uploaded CSVs. Run timings "
        "follow the private lot sizes: durations were left out and every timestamp of a run or sweep is floored "
        "to the UTC day."
    ),
    True: (
        "Holds private diagnostics computed on the training data (the loss, accuracy and size of each step's "
        "lot, the share clipped, gradient-norm quantiles, realized regret, step timings, each run's duration and "
        "exact timestamps, the error text of failed runs on uploaded CSVs). No epsilon covers "
        "them: do not publish or share this archive as differentially private."
    ),
}


# A run on an uploaded CSV may fail on one of its cells, and the error (and the status history's detail) quotes
# the cell: a value read from the private file. Default exports carry this note in its place.
WITHHELD_ERROR = (
    "error text withheld from this export: it may quote values of the uploaded training file "
    "(export with private diagnostics to include it)"
)


def quotes_uploaded_values(spec: Mapping[str, Any]) -> bool:
    """Whether the run's error texts may quote cells of a private uploaded file (a CSV dataset)."""
    return str(spec.get("dataset", "")).startswith(CSV_PREFIX)


def is_private_field(name: str) -> bool:
    """Whether a result field holds a private diagnostic (by its name)."""
    return name in PRIVATE_DIAGNOSTICS or any(stem in name for stem in PRIVATE_RESULT_STEMS)


def day_of(at: float) -> float:
    """A timestamp (seconds since the epoch) floored to the start of its UTC day: order is kept, durations
    within a day are not."""
    return float(at // DAY_S * DAY_S)


def exact_time(at: float | None) -> bool:
    """Whether a timestamp says more than its UTC day (a default export's never does)."""
    return at is not None and at % DAY_S != 0


def public_result(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The result without its private-diagnostic fields, at any depth (None stays None)."""
    if result is None:
        return None

    def clean(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {k: clean(v) for k, v in node.items() if not (isinstance(k, str) and is_private_field(k))}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    return clean(result)

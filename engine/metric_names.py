"""The names of a run's per-step metrics, in one place: the trainer writes them (`StepRecord`'s fields), the
recorder adds the accountants' curves, the disclosure rules sort them into released values and private
diagnostics, and the dashboard's charts read them back.

ε is written twice over: `epsilon`, the curve the trainer streams at every step (by `STREAMED_ACCOUNTANT`), and
`epsilon_<accountant>` for each accountant's curve the recorder computes beside the run (and, in a comparison
table, each accountant's final ε). Standard library only: every layer may import it.
"""

EPSILON = "epsilon"  # the trainer's ε at every step
STREAMED_ACCOUNTANT = "rdp"  # the accountant whose ε the trainer streams as `EPSILON`
EPSILON_PREFIX = "epsilon_"  # epsilon_naive, epsilon_advanced, epsilon_zcdp, epsilon_pld, ...

EPOCH = "epoch"
TEST_ACCURACY = "test_accuracy"
TEST_LOSS = "test_loss"
REGRET_BOUND = "regret_bound"  # the online learners' theorem bound: a formula of public parameters

# Per-step values the run releases (besides every accountant's ε curve).
RELEASED_METRICS = frozenset({EPOCH, EPSILON, TEST_ACCURACY, TEST_LOSS, REGRET_BOUND})
# Per-step values computed on the private training data, which no ε covers (`StepRecord`'s fields marked private).
PRIVATE_DIAGNOSTICS = frozenset(
    {
        "train_loss",
        "train_accuracy",
        "lot_size",
        "clip_fraction",
        "grad_norm_p10",
        "grad_norm_p50",
        "grad_norm_p90",
        "regret",
        "regret_nonprivate",
        "elapsed_s",
    }
)


def epsilon_metric(accountant: str) -> str:
    """The metric (or table column) that holds `accountant`'s ε: `epsilon_<accountant>`."""
    return f"{EPSILON_PREFIX}{accountant}"


def accountant_of(metric: str) -> str | None:
    """The accountant whose ε `metric` holds (`epsilon` is the streamed accountant's); None for any other metric."""
    if metric == EPSILON:
        return STREAMED_ACCOUNTANT
    if metric.startswith(EPSILON_PREFIX) and metric != EPSILON_PREFIX:
        return metric.removeprefix(EPSILON_PREFIX)
    return None


def is_epsilon_metric(metric: str) -> bool:
    """Whether a per-step metric holds an ε (`epsilon` or `epsilon_<accountant>`)."""
    return accountant_of(metric) is not None


def is_released_metric(metric: str) -> bool:
    """Whether a per-step metric is a released value (kept in every export); a name not known here is not."""
    return metric in RELEASED_METRICS or is_epsilon_metric(metric)

"""What a stored run's result says, and how long a running one has left, read the same way on every page;
`duration_text` is the one way a duration is written (ETAs, expected durations)."""

import math

from cache import RunRecord, RunStatus


def finite_epsilon(run: RunRecord) -> float | None:
    """The finished run's reported ε (the tightest accountant over the steps taken), if private."""
    epsilon = (run.result or {}).get("epsilon")
    usable = isinstance(epsilon, int | float) and not isinstance(epsilon, bool) and math.isfinite(epsilon)
    return float(epsilon) if usable else None


def finite_accuracy(run: RunRecord) -> float | None:
    """The run's final test accuracy, if its result holds a finite number."""
    accuracy = (run.result or {}).get("test_accuracy")
    usable = isinstance(accuracy, int | float) and not isinstance(accuracy, bool) and math.isfinite(accuracy)
    return float(accuracy) if usable else None


MIN_ETA_STEPS, MIN_ETA_SECONDS = 10, 1.0  # the measured pace an ETA needs: early steps are noisy


def remaining_seconds(frame, total: int) -> float | None:
    """Time left at the step rate measured so far (start-up time excluded); None until at least
    `MIN_ETA_STEPS` steps over `MIN_ETA_SECONDS` are measured, so that the first estimate does not jump."""
    if "elapsed_s" not in frame:
        return None
    timed = frame[["step", "elapsed_s"]].dropna()
    if len(timed) < 2:
        return None
    steps = timed["step"].iloc[-1] - timed["step"].iloc[0]
    seconds = timed["elapsed_s"].iloc[-1] - timed["elapsed_s"].iloc[0]
    if steps < MIN_ETA_STEPS or seconds < MIN_ETA_SECONDS:
        return None
    return seconds / steps * (total - timed["step"].iloc[-1])


def time_left_text(frame, total: int, done: int) -> str:
    """A running run's time left after `done` of `total` steps ("about 12 h 48 min left", "finishing"), or
    "measuring the pace" until `remaining_seconds` has one."""
    if (left := remaining_seconds(frame, total)) is None:
        return "measuring the pace" if done < total else "finishing"
    return f"about {duration_text(left)} left" if left >= 1 else "finishing"


def cancelling(run: RunRecord) -> bool:
    """A running run with a cancel request (the store's, so every tab sees it) that its worker has not yet acted
    on: it stops at its next step."""
    return run.status is RunStatus.RUNNING and run.cancel_requested


# (below this many seconds, round to this many seconds): a duration is written to the precision it deserves
DURATION_ROUNDING = ((60, 1), (600, 10), (86_400, 60))
DAY_ROUNDING = 3_600
DURATION_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def duration_text(seconds: float) -> str:
    """A duration in days, hours, minutes and seconds ("45 s", "3 min 20 s", "12 h 48 min", "2 d 3 h"), rounded
    first (to 1 s under a minute, 10 s under 10 minutes, a minute under a day, an hour beyond), then split, so
    that 59.7 s reads "1 min" and 46,102 s "12 h 48 min". Under half a second reads "under 1 s"; "?" for a value
    that is not a finite non-negative number."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds < math.inf:
        return "?"
    if seconds < 0.5:
        return "under 1 s"
    unit = next((unit for below, unit in DURATION_ROUNDING if seconds < below - unit / 2), DAY_ROUNDING)
    left = round(seconds / unit) * unit
    parts = []
    for name, size in DURATION_UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{int(count)} {name}")
    return " ".join(parts)

"""What a stored run's result says, and how long a running one has left, read the same way on every page."""

import math

from cache import RunRecord


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

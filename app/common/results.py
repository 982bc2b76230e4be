"""What a stored run's result says, read the same way on every page."""

import math

from cache import RunRecord


def finite_epsilon(run: RunRecord) -> float | None:
    """The finished run's reported ε (the tightest accountant over the steps taken), if private."""
    epsilon = (run.result or {}).get("epsilon")
    usable = isinstance(epsilon, int | float) and not isinstance(epsilon, bool) and math.isfinite(epsilon)
    return float(epsilon) if usable else None

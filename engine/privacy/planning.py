"""The (q, T) schedule of a Poisson-sampled run, in one place: the run spec, the training plan, the
`epsilon` / `calibrate` commands and the Plan page all read it from here.

An epoch is N/L steps of expected lot size L, so `epochs` epochs are T = ⌈epochs·N/L⌉ steps at sampling
rate q = L/N (Abadi et al. 2016, §3.1: "lot" and "epoch"). T is rounded up, with a tolerance of
`STEP_TOLERANCE` so that a whole number of steps computed in floating point is not rounded up once more.

Two caps, for two different costs:

- `MAX_TRAINING_STEPS`: what one training run may take (its live ε curve holds steps × RDP orders floats,
  about 120 MB at the limit);
- `MAX_PLAN_STEPS`: what a schedule may be planned or accounted for without training (the accountants'
  limit, `limits.MAX_ACCOUNTED_STEPS`: beyond it the PLD curve and σ calibration take too long for an
  interactive page).

Pure arithmetic: no torch, no data.
"""

import math

from engine.privacy.limits import MAX_ACCOUNTED_STEPS

MAX_TRAINING_STEPS = 250_000
MAX_PLAN_STEPS = MAX_ACCOUNTED_STEPS
STEP_TOLERANCE = 1e-9
STEPS_CEILING = 1e18  # what `steps_at_rate` says for any larger step count


def sampling_rate(*, lot_size: float, n_train: int) -> float:
    """q = L/N: the probability that Poisson sampling puts an example in a lot."""
    return lot_size / n_train


def steps_for(*, epochs: float, n_train: int, lot_size: float) -> int:
    """T = ⌈epochs·N/L⌉, at least 1: an epoch is N/L steps of expected lot size L."""
    return max(1, math.ceil(epochs * n_train / lot_size - STEP_TOLERANCE))


def steps_at_rate(*, epochs: float, sampling_rate: float) -> int:
    """T = ⌈epochs/q⌉ for a schedule given by its sampling rate alone (N unknown). Not floored at 1: a
    vanishing number of epochs gives 0 steps, which the caller refuses by its own range check; nor does it
    overflow: beyond `STEPS_CEILING` (a subnormal q makes epochs/q ∞) it is STEPS_CEILING, far past any cap."""
    return math.ceil(min(epochs / sampling_rate, STEPS_CEILING) - STEP_TOLERANCE)

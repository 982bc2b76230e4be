"""The allowed ranges of the privacy parameters, in one place: run specs, grid specs, the command line's
`epsilon` and `calibrate`, and calibration itself read them from here.

`NumberRange` is a plain value: it describes an interval ("a number in (0, 0.1]") and says what is wrong
with a value (`problem`), so each caller raises its own named error with the field's name. Values are
checked for type before range: booleans are not numbers, NaN and ±∞ are never in range, and an integer
too large for a float is out of range, not an `OverflowError`.
"""

import math
from dataclasses import dataclass
from typing import Any

SIGMA_MIN = 0.05
SIGMA_MAX = 500.0
MAX_ACCOUNTED_STEPS = 10_000_000  # what the accountants are asked about at most (the CLI, the Plan page)
MAX_CURVE_POINTS = 250_000  # step counts of a curve asked for "every step" (a training run's cap: every one)
MAX_SHOWN_CHARACTERS = 80  # of a rejected value echoed in an error message


def brief(value: Any, limit: int = MAX_SHOWN_CHARACTERS) -> str:
    """`repr(value)`, cut to `limit` characters with a note of how much was left out: an error message
    never echoes a megabyte of input."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        digits = int(abs(value).bit_length() * math.log10(2)) + 1  # str() of a huge int is slow, or refused
        return f"an integer of about {digits:,} digits"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


@dataclass(frozen=True, kw_only=True)
class NumberRange:
    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        if self.integer:
            return f"an integer in {left}{int(self.low)}, {int(self.high)}{right}"
        return f"a number in {left}{self.low:g}, {self.high:g}{right}"

    def problem(self, value: Any) -> str | None:
        """None when `value` is in range, else the sentence that says so ("must be a number in …, got …")."""
        ok_type = isinstance(value, int) if self.integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type:
            return f"must be {self.describe()}, got {brief(value)}"
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range: far outside any range here
            return f"must be {self.describe()}, got {brief(value)}"
        below = number <= self.low if self.low_open else number < self.low
        above = number >= self.high if self.high_open else number > self.high
        if not math.isfinite(number) or below or above:
            return f"must be {self.describe()}, got {brief(value)}"
        return None

    def convert(self, value: Any) -> float | int:
        """The value as the range's type (after `problem` returned None)."""
        return int(value) if self.integer else float(value)


TARGET_EPSILON = NumberRange(low=0.01, high=100.0)
NOISE_MULTIPLIER = NumberRange(low=SIGMA_MIN, high=SIGMA_MAX)
DELTA = NumberRange(low=0.0, high=0.1, low_open=True)  # and below 1/N, which needs the dataset
SAMPLING_RATE = NumberRange(low=0.0, high=1.0, low_open=True)
# Rates below this are accounted at this rate (`events.dpsgd_step_event`): one example of a 10⁹-example dataset.
# Far below it dp_accounting's RDP series fail to converge (q = 1e-310 ended in an overflow).
MIN_ACCOUNTED_SAMPLING_RATE = 1e-9
ACCOUNTED_STEPS = NumberRange(low=1, high=MAX_ACCOUNTED_STEPS, integer=True)

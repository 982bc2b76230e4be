"""Schedules for the learning rate, the noise multiplier σ and the clipping norm C, as multipliers
of the spec's base value over (fractional) epochs.

- ``constant``: 1 throughout.
- ``step``: ``factor ** k`` after k full periods of ``every_epochs`` (e.g. halve every 5 epochs).
- ``linear``: from 1 down (or up) to ``end_factor`` over the first ``epochs`` epochs, then
  ``end_factor`` (Abadi et al. 2016, MNIST: lr 0.1 → 0.052 over 10 epochs is ``end_factor`` 0.52, ``epochs`` 10).

A σ schedule changes the privacy ledger (one phase per distinct σ), so it must be piecewise
constant: ``linear`` is refused for σ. The lr and C schedules are free: the lr is post-processing,
and C only scales the noise (σ·C) with the sensitivity, leaving every accountant's ε unchanged.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.privacy.limits import NumberRange, brief


class ScheduleKind(StrEnum):
    CONSTANT = "constant"
    STEP = "step"
    LINEAR = "linear"


class ScheduleError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, kw_only=True)
class Schedule:
    kind: ScheduleKind = ScheduleKind.CONSTANT
    factor: float | None = None  # step: multiplier per period
    every_epochs: float | None = None  # step: period length
    end_factor: float | None = None  # linear: final multiplier
    epochs: float | None = None  # linear: epochs to reach it

    def factor_at(self, epoch: float) -> float:
        """The multiplier of the base value at a (fractional) epoch ≥ 0 (+∞ past the largest float)."""
        if self.kind is ScheduleKind.STEP:
            try:
                return self.factor ** math.floor(epoch / self.every_epochs + 1e-9)
            except OverflowError:
                return math.inf
        if self.kind is ScheduleKind.LINEAR:
            progress = min(1.0, epoch / self.epochs)
            return 1.0 + (self.end_factor - 1.0) * progress
        return 1.0

    def phases(self, steps: int, epoch_of_step: Callable[[int], float]) -> tuple[tuple[float, int], ...]:
        """Runs of equal multipliers over steps 1..steps, as (multiplier, number of steps)."""
        runs: list[list[float | int]] = []
        for step in range(1, steps + 1):
            value = self.factor_at(epoch_of_step(step))
            if runs and runs[-1][0] == value:
                runs[-1][1] += 1
            else:
                runs.append([value, 1])
        return tuple((float(v), int(n)) for v, n in runs)

    def first_step_outside(
        self, *, base: float, allowed: NumberRange, steps: int, epoch_of_step: Callable[[int], float]
    ) -> tuple[int, float] | None:
        """The first of steps 1..steps whose value, base × multiplier, leaves `allowed`, as (step, value); None if
        none does. The multiplier is monotone in the step (a step schedule's `factor ** k` with k growing, a linear
        one's ramp), so the last step decides whether any leaves, and a bisection finds the first: O(log steps).
        """

        def outside(step: int) -> bool:
            return allowed.problem(base * self.factor_at(epoch_of_step(step))) is not None

        if steps < 1 or not outside(steps):
            return None
        low, high = 1, steps  # outside(high); the first step outside is in [low, high]
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if outside(middle) else (middle + 1, high)
        return low, base * self.factor_at(epoch_of_step(low))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value}
        for key in ("factor", "every_epochs", "end_factor", "epochs"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


CONSTANT = Schedule()
FIELDS = {
    ScheduleKind.CONSTANT: {},
    ScheduleKind.STEP: {"factor": (0.0, 10.0), "every_epochs": (0.0, 1000.0)},
    ScheduleKind.LINEAR: {"end_factor": (0.0, 10.0), "epochs": (0.0, 1000.0)},
}


def parse_schedule(field: str, raw: Any, *, allowed: tuple[ScheduleKind, ...] = tuple(ScheduleKind)) -> Schedule:
    """A schedule from its JSON form, e.g. {"kind": "step", "factor": 0.5, "every_epochs": 5}."""
    if not isinstance(raw, Mapping):
        raise ScheduleError(field, f'must be an object like {{"kind": "constant"}}, got {brief(raw)}')
    kinds = ", ".join(k.value for k in allowed)
    try:
        kind = ScheduleKind(raw.get("kind"))
    except ValueError:
        raise ScheduleError(f"{field}.kind", f"must be one of {kinds}; got {brief(raw.get('kind'))}") from None
    if kind not in allowed:
        raise ScheduleError(f"{field}.kind", f"must be one of {kinds} here; got {kind.value!r}")
    needed = FIELDS[kind]
    unknown = sorted(set(raw) - {"kind"} - set(needed))
    if unknown:
        allowed_keys = ", ".join(["kind", *needed])
        raise ScheduleError(
            f"{field}.{str(unknown[0])[:40]}", f"unknown key for kind {kind.value!r}; allowed: {allowed_keys}"
        )
    values: dict[str, float] = {}
    for key, (low, high) in needed.items():
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not low < value <= high:
            raise ScheduleError(f"{field}.{key}", f"must be a number in ({low:g}, {high:g}], got {brief(value)}")
        values[key] = float(value)
    return Schedule(kind=kind, **values)

"""The privacy ledger of a run: what it released, in order, as values.

`upfront` releases happen before the first step (DP-PCA, the noisy count of Near & Abuah's noisy gradient
descent); `phases` are runs of identical steps (a schedule that changes σ, C or q is several phases). Accountants
read the ledger to give ε after any number of steps; `dp_event()` is the same ledger as one `dp_accounting` event.

`replayed_steps` is for a run that restarted in lab mode: an earlier attempt already released its first
`replayed_steps` steps, and this attempt replays them with the same noise, so after t steps the run has released
max(t, `replayed_steps`) steps (`counts_at`). A restart with fresh noise is charged as up-front releases instead
(`engine.privacy.restarts`).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from dp_accounting import NeighboringRelation, dp_event

from engine.privacy.errors import PrivacyError
from engine.privacy.limits import MAX_CURVE_POINTS


@dataclass(frozen=True, kw_only=True)
class Release:
    """`count` occurrences in a row of one mechanism (`event` describes one occurrence)."""

    event: dp_event.DpEvent
    count: int = 1
    label: str = ""

    def __post_init__(self) -> None:
        if int(self.count) != self.count or self.count < 0:
            raise PrivacyError(f"count must be a non-negative integer, got {self.count}")


@dataclass(frozen=True, kw_only=True)
class PrivacyLedger:
    phases: tuple[Release, ...] = ()
    upfront: tuple[Release, ...] = ()
    neighboring: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE
    notes: tuple[str, ...] = field(default=())
    replayed_steps: int = 0  # steps an earlier attempt released with the noise this one replays

    def __post_init__(self) -> None:
        if int(self.replayed_steps) != self.replayed_steps or not 0 <= self.replayed_steps <= self.steps:
            raise PrivacyError(f"replayed_steps must be an integer in [0, {self.steps}], got {self.replayed_steps}")

    @property
    def steps(self) -> int:
        return sum(p.count for p in self.phases)

    @property
    def releases(self) -> tuple[Release, ...]:
        return self.upfront + self.phases

    def queried_steps(self, steps: Sequence[int] | np.ndarray | None) -> np.ndarray:
        """The step counts an accountant is asked about: by default every step 1..T, or, past
        `MAX_CURVE_POINTS` steps, that many evenly spaced ones ending at T (a curve over 10⁷ steps would
        otherwise hold 10⁷ × orders floats)."""
        if steps is not None:
            return np.asarray(steps, dtype=np.int64)
        if self.steps <= MAX_CURVE_POINTS:
            return np.arange(1, self.steps + 1)
        return np.unique(np.linspace(1, self.steps, MAX_CURVE_POINTS).round().astype(np.int64))

    def counts_at(self, steps: Sequence[int] | np.ndarray) -> np.ndarray:
        """(len(steps) × len(releases)) occurrences of each release after each step count (a count below
        `replayed_steps` charges `replayed_steps`: those steps were released already)."""
        t = np.asarray(steps, dtype=np.int64)
        if t.ndim != 1 or (len(t) and (t.min() < 0 or t.max() > self.steps)):
            raise PrivacyError(f"steps must lie in [0, {self.steps}]")
        t = np.maximum(t, self.replayed_steps)
        columns = [np.full(len(t), r.count, dtype=np.int64) for r in self.upfront]
        start = 0
        for phase in self.phases:
            columns.append(np.clip(t - start, 0, phase.count))
            start += phase.count
        return np.stack(columns, axis=1) if columns else np.zeros((len(t), 0), dtype=np.int64)

    def truncated(self, steps: int) -> "PrivacyLedger":
        """The ledger of the first `steps` steps (with every up-front release); a lab-mode restart's replayed
        steps are charged as steps of the result (its `replayed_steps` is 0)."""
        counts = self.counts_at([steps])[0][len(self.upfront) :]
        phases = tuple(
            Release(event=p.event, count=int(c), label=p.label) for p, c in zip(self.phases, counts, strict=True) if c
        )
        return PrivacyLedger(phases=phases, upfront=self.upfront, neighboring=self.neighboring, notes=self.notes)

    def dp_event(self) -> dp_event.DpEvent:
        events = [dp_event.SelfComposedDpEvent(event=r.event, count=r.count) for r in self.releases if r.count]
        return dp_event.ComposedDpEvent(events=events)


def single_phase(event: dp_event.DpEvent, steps: int, *, label: str = "step", **kwargs) -> PrivacyLedger:
    return PrivacyLedger(phases=(Release(event=event, count=steps, label=label),), **kwargs)


def schedule(phases: Iterable[tuple[dp_event.DpEvent, int]], **kwargs) -> PrivacyLedger:
    """Heterogeneous steps: (step event, number of steps) in order."""
    return PrivacyLedger(
        phases=tuple(Release(event=e, count=n, label=f"phase {i + 1}") for i, (e, n) in enumerate(phases)), **kwargs
    )

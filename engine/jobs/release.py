"""What releasing several runs together costs, when some of them trained in one stack.

Runs that trained apart drew their own lots and noise: releasing them together costs the composition of their
ledgers. The members of a stack (`engine.training.trainers.stack`) shared every Poisson lot, so their
transcripts are not independent releases: together they are one Gaussian mechanism per shared lot at σ_joint =
(Σₖ σₖ⁻²)^(−1/2) (`members_ledger`), which costs more than composing the members as if each drew its own lots
(amplification by subsampling applies once to the whole stack, not once per member). So the ledger of a set of
released runs is one ledger per stack among them (its released members' joint ledger) and one per run that trained
alone, composed (`release_ledgers`, `release_epsilon`).

Picking the best run of a fixed grid looks at every run, so it costs releasing them all; a private search's trials
never stack. A run that restarted is charged its earlier attempts here too (`RunToRelease.earlier_attempts`).
"""

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from engine.privacy import PrivacyLedger
from engine.privacy.selection import composition_epsilon
from engine.training import RunSpec, StackMember, TrainingPlan, parse_spec, plan_spec
from engine.training.noise import REPRODUCIBLE, noise_mode
from engine.training.trainers.stack import members_ledger

DEFAULT_DELTA = 1e-5  # the δ of a set of runs none of which is private: every ε is then ∞ whatever δ


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunToRelease:
    """One run of a set released together: its raw spec, the stack it trained in (None: alone) and, for a run that
    restarted, the steps its earlier attempts released (its stored plan's `earlier_attempts`)."""

    spec: Mapping[str, Any]
    stack: str | None = None
    earlier_attempts: tuple[int, ...] = ()

    @classmethod
    def of_record(cls, spec: Mapping[str, Any], *, stack: str | None, plan: Mapping[str, Any] | None):
        return cls(spec=spec, stack=stack, earlier_attempts=tuple((plan or {}).get("earlier_attempts", ())))


@functools.lru_cache(maxsize=512)
def plan_of(spec_json: str) -> TrainingPlan:
    """A raw spec's plan (its canonical JSON text, the cache key): calibrating σ for a target ε takes ~1 s."""
    return plan_spec(parse_spec(json.loads(spec_json)))


def planned(spec: Mapping[str, Any], earlier_attempts: Sequence[int] = ()) -> TrainingPlan:
    """The plan a raw spec trains with (every step it allows), charged the earlier attempts of a restart."""
    seedless = {k: v for k, v in spec.items() if k != "seed"} | {"seed": 0}  # no plan depends on the seed
    plan = plan_of(json.dumps(seedless, sort_keys=True, default=str))
    return restarted(plan, parse_spec(dict(spec)), earlier_attempts) if earlier_attempts else plan


def restarted(plan: TrainingPlan, spec: RunSpec, earlier_attempts: Sequence[int]) -> TrainingPlan:
    """`plan` charged the steps each earlier attempt of a restarted run released (`engine.privacy.restarts`):
    lab-mode noise replays them, release-mode noise is fresh."""
    replayed = noise_mode(spec) == REPRODUCIBLE
    return dataclasses.replace(plan, earlier_attempts=tuple(earlier_attempts), earlier_noise_replayed=replayed)


def release_ledgers(runs: Sequence[RunToRelease]) -> list[PrivacyLedger | None]:
    """The independent ledgers of releasing `runs` together, in order of first appearance: a stack's released
    members as one joint ledger, every other run its own (None: not private, or no bound)."""
    groups: dict[Any, list[RunToRelease]] = {}
    for position, run in enumerate(runs):
        groups.setdefault(run.stack if run.stack is not None else ("alone", position), []).append(run)
    ledgers = []
    for members in groups.values():
        plans = [planned(run.spec, run.earlier_attempts) for run in members]
        if len(members) == 1 or not all(plan.private for plan in plans):
            ledgers.extend(plan.ledger() for plan in plans)
            continue
        stacked = [
            StackMember(spec=parse_spec(dict(run.spec)), plan=plan) for run, plan in zip(members, plans, strict=True)
        ]
        ledgers.append(members_ledger(stacked))
    return ledgers


def release_delta(runs: Sequence[RunToRelease]) -> float:
    """The δ a set of runs is released at: the smallest of the private ones' (`DEFAULT_DELTA` if none is)."""
    deltas = [plan.delta for run in runs if (plan := planned(run.spec)).private and plan.delta]
    return min(deltas) if deltas else DEFAULT_DELTA


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseEpsilon:
    """(ε, δ) of releasing a set of runs together, by `accountant` (the tightest of RDP and PLD)."""

    epsilon: float
    delta: float
    accountant: str
    runs: int
    stacks: int  # stacks of two released members or more among them


def release_epsilon(runs: Sequence[RunToRelease], *, delta: float | None = None) -> ReleaseEpsilon:
    """What releasing `runs` together costs (so also releasing the best of them, picked by looking at all):
    their stacks' joint ledgers and the other runs' ledgers composed; at `delta` (default `release_delta`)."""
    delta = delta if delta is not None else release_delta(runs)
    accountant, epsilon = composition_epsilon(release_ledgers(runs), delta=delta)
    stacks = {run.stack for run in runs if run.stack is not None}
    shared = sum(sum(run.stack == stack for run in runs) > 1 for stack in stacks)
    return ReleaseEpsilon(epsilon=float(epsilon), delta=delta, accountant=accountant, runs=len(runs), stacks=shared)

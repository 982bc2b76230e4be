"""The joint ledger of a stack: what releasing several of its members together costs.

The members of a stack share every Poisson lot and each draws its own noise, so per step the K noisy sums of one
lot are one Gaussian mechanism whose sensitivity, in units of each member's noise, is √(Σₖ σₖ⁻²): a sampled
Gaussian at σ_joint = (Σₖ σₖ⁻²)^(−1/2) (`joint_ledger`). It is valid only because no two members share a noise
stream; members that would are refused a bound (`members_ledger` is None, `joint_epsilon` ∞).
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.privacy import PrivacyLedger, Release, dpsgd_step_event, panel
from engine.privacy.restarts import charge_earlier_attempts
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.noise import noise_stream_key, pca_release_identity

JOINT_ACCOUNTANTS = ("rdp", "pld")  # the joint ε is the tightest of these for the joint ledger


@dataclass(frozen=True, kw_only=True)
class StackMember:
    spec: RunSpec
    plan: TrainingPlan


def joint_ledger(plans: Sequence[TrainingPlan], *, upfront_keys: Sequence[str] | None = None) -> PrivacyLedger:
    """The ledger of releasing every member of a stack: per step, the K noisy sums of one shared lot are one
    Gaussian mechanism whose sensitivity, in units of each member's noise, is √(Σₖ σₖ⁻²): a sampled Gaussian
    at σ_joint = (Σₖ σₖ⁻²)^(−1/2), each member's sum moving by at most its own C (valid only because no two
    members share a noise stream). Before the steps, every distinct up-front release (DP-PCA) of the members:
    `upfront_keys[k]` names member k's release, and members with one key made one release (charged once);
    without keys every member's up-front releases are charged. A stack that restarted charges its earlier attempts
    (`engine.privacy.restarts`) on the joint ledger: each member's longest earlier attempt of each number, since the
    members stopped together."""
    keys = list(upfront_keys) if upfront_keys is not None else [str(k) for k in range(len(plans))]
    firsts: dict[str, TrainingPlan] = {}
    for key, plan in zip(keys, plans, strict=True):
        firsts.setdefault(key, plan)
    upfront = tuple(release for plan in firsts.values() for release in plan.upfront())
    steps = plans[0].steps
    sigmas = np.array(
        [np.repeat([p.noise_multiplier * f for f, _ in p.noise_phases], [n for _, n in p.noise_phases]) for p in plans]
    )  # (K, T): σ of every member at every step
    joint = (1.0 / np.square(sigmas)).sum(axis=0) ** -0.5
    phases, start = [], 0
    for end in [*np.flatnonzero(np.diff(joint)) + 1, steps]:
        event = dpsgd_step_event(sampling_rate=plans[0].sampling_rate, noise_multiplier=float(joint[start]))
        label = f"the stack's {len(plans)} releases of one step, σ_joint = {joint[start]:.4g}"
        phases.append(Release(event=event, count=int(end - start), label=label))
        start = end
    attempts = [max(steps) for steps in itertools.zip_longest(*(p.earlier_attempts for p in plans), fillvalue=0)]
    replayed = all(p.earlier_noise_replayed for p in plans)
    return charge_earlier_attempts(PrivacyLedger(phases=tuple(phases), upfront=upfront), attempts, replayed=replayed)


def members_ledger(members: Sequence[StackMember], plans: Sequence[TrainingPlan] | None = None) -> PrivacyLedger | None:
    """The ledger of releasing `members` of one stack together (`joint_ledger`, up-front releases included, one
    per distinct PCA release; `plans` default to the members'); None (no bound) if two members would share a
    noise stream: their models would then differ by a noiseless function of the data."""
    keys = [noise_stream_key(m.spec) for m in members]
    if len({k for k in keys if k is not None}) < sum(k is not None for k in keys):
        return None
    plans = plans if plans is not None else [m.plan for m in members]
    return joint_ledger(plans, upfront_keys=[pca_release_identity(m.spec) for m in members])


def joint_epsilon(members: Sequence[StackMember], plans: Sequence[TrainingPlan]) -> dict[str, Any]:
    """The stack's joint ε by the tightest of `JOINT_ACCOUNTANTS` for `members_ledger`, at the smallest δ of the
    members; ∞ (no bound) if two members would share a noise stream."""
    delta = min(p.delta for p in plans)
    if (ledger := members_ledger(members, plans)) is None:
        return {"joint_epsilon": math.inf, "joint_accountant": "shared noise stream", "joint_delta": delta}
    name, epsilon = panel(ledger, delta=delta, names=JOINT_ACCOUNTANTS).tightest()
    return {"joint_epsilon": float(epsilon), "joint_accountant": name, "joint_delta": delta}

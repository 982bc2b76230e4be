"""The attack curve of a finished private run stored before the engine kept one (`engine.privacy.tradeoff`):
computed on demand from the run's stored spec and plan, by the accountant its result names, and cached."""

import json
import math

import streamlit as st

from cache import RunRecord
from engine.jobs.release import planned
from engine.privacy import PrivacyError
from engine.privacy.tradeoff import AttackBound, attack_bound, attack_bound_of
from engine.training import SpecError


def run_attack_bound(run: RunRecord) -> tuple[AttackBound | None, bool]:
    """(the run's attack curve, whether it was computed now): the one its result stores, else one computed from
    its spec and plan for the steps it took; (None, False) for a run with no private result or whose spec this
    engine cannot plan."""
    result = run.result or {}
    if (stored := attack_bound_of(result.get("attack_bound"))) is not None:
        return stored, False
    epsilon, steps, delta = result.get("epsilon"), result.get("steps"), result.get("delta")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (epsilon, steps, delta))
    if not result.get("private") or not numbers or not 0 < delta < 1 or math.isnan(epsilon):
        return None, False
    accountant = result.get("accountant") if isinstance(result.get("accountant"), str) else None
    earlier = (run.plan or {}).get("earlier_attempts") or []
    computed = _computed(
        json.dumps(run.spec, sort_keys=True, default=str),
        int(steps),
        json.dumps(earlier),
        accountant,
        float(epsilon),
        float(delta),
    )
    return attack_bound_of(computed), computed is not None


@st.cache_data(show_spinner="Computing what ε means for an attacker…", max_entries=64)
def _computed(
    spec_json: str, steps: int, earlier_json: str, accountant: str | None, epsilon: float, delta: float
) -> dict | None:
    try:
        plan = planned(json.loads(spec_json), tuple(json.loads(earlier_json)))
        if not plan.private:
            return None
        bound = attack_bound(plan.ledger(steps), accountant=accountant, epsilon=epsilon, delta=delta)
    except (SpecError, PrivacyError, TypeError, ValueError):
        return None
    return bound.to_dict()

"""The `audit` option of a DP-SGD spec: canaries for a one-run audit of the run's ε (`engine.training.canaries`,
`engine.privacy.auditing`).

    "audit": {"canaries": 1000, "kind": "gradient"}

`kind` "gradient": white-box canaries, a crafted gradient of norm C in one coordinate of the model (a Dirac
canary, Nasr et al. 2023), one of the coordinates where the public test split's gradient at the initial model is
smallest (so at most one canary per trainable coordinate: `parse_spec` counts them on the model the spec builds,
`config.reach`), added to the clipped sum of each lot it is sampled into and scored by the released noisy sums in
that coordinate. "input": black-box canaries, out-of-distribution inputs with random labels trained on like any
example and scored by the final model's loss on them.
"""

from collections.abc import Mapping
from typing import Any

from engine.privacy.limits import brief

AUDIT_KINDS = ("gradient", "input")


class AuditError(ValueError):
    """The `audit` option is malformed (the spec reports it as its `audit` field)."""


AUDIT_CANARIES = (10, 100_000)  # fewer than 10 canaries can show nothing; the upper end bounds memory and time


def parse_audit(raw: Any) -> dict[str, Any]:
    """The canonical `audit` option, or AuditError saying what is allowed."""
    if not isinstance(raw, Mapping):
        raise AuditError(f'must be an object like {{"canaries": 1000, "kind": "gradient"}}, got {brief(raw)}')
    unknown = sorted(set(raw) - {"canaries", "kind"})
    if unknown:
        raise AuditError(f"unknown key {brief(unknown[0])}; allowed: canaries, kind")
    low, high = AUDIT_CANARIES
    canaries = raw.get("canaries")
    if isinstance(canaries, bool) or not isinstance(canaries, int) or not low <= canaries <= high:
        raise AuditError(f"canaries must be an integer in [{low:,}, {high:,}], got {brief(canaries)}")
    kind = raw.get("kind", AUDIT_KINDS[0])
    if kind not in AUDIT_KINDS:
        raise AuditError(f"kind must be one of {', '.join(AUDIT_KINDS)}; got {brief(kind)}")
    return {"canaries": canaries, "kind": kind}


def canary_count_problem(canaries: int, coordinates: int) -> str | None:
    """What is wrong with asking a model of `coordinates` trainable coordinates for `canaries` gradient canaries
    (each takes one of them), or None."""
    if canaries <= coordinates:
        return None
    low, high = AUDIT_CANARIES[0], min(AUDIT_CANARIES[1], coordinates)
    return (
        f"canaries must be an integer in [{low:,}, {high:,}] for this model (gradient canaries take one of its "
        f"{coordinates:,} trainable coordinates each), got {canaries:,}"
    )

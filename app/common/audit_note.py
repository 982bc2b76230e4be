"""An audited run's empirical lower bound ε̂ beside its reported ε (run panel, reports): the interval the true ε lies
in, and the ceiling its canaries could reach, so a small ε̂ is never read as proof of privacy."""

from collections.abc import Mapping
from typing import Any

from engine.jobs.run_schema import RunShapeError, check_audit
from engine.privacy import epsilon_text
from engine.privacy.auditing import CANARY_KINDS


def audit_of(result: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The audit stored with a run's result, when it has the shape the engine writes (`check_audit`)."""
    audit = (result or {}).get("audit")
    if audit is None:
        return None
    try:
        check_audit(audit)
    except RunShapeError:
        return None
    return audit


def audit_text(audit: Mapping[str, Any], epsilon: float | None) -> str:
    """One paragraph: ε̂ ≤ true ε ≤ reported ε, the guesses behind ε̂ and the ceiling."""
    reported = "∞" if epsilon is None else epsilon_text(epsilon, ".3f")
    kind = CANARY_KINDS.get(str(audit.get("kind")), "canaries")
    return (
        f"**Audited**: {audit['epsilon']:.3f} ≤ true ε ≤ {reported} ({audit['confidence']:.0%} confidence for the "
        f"lower end, δ = {audit['delta']:.3g}). {audit['correct']:,} of {audit['guesses']:,} guesses about "
        f"{audit['canaries']:,} {kind} were right. {audit['canaries']:,} canaries can show at most "
        f"ε̂ = {audit['ceiling']:.3f} (the audit's ceiling): a lower bound under it does not show the run is more "
        "private than reported, only that it is not less private than the bound."
    )

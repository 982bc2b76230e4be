"""What the run panel says of a run that restarted: its earlier attempts and what they were charged."""

from cache import RunRecord
from engine.privacy import epsilon_text


def restart_text(run: RunRecord) -> str | None:
    """What a run that restarted (its worker stopped or was lost, and it trained again from step 0) has been
    charged for its earlier attempts; None for a run that did not restart. Reads the stored plan (checked at
    import: `earlier_attempts` a list of steps) and the result's `restart`."""
    plan = run.plan or {}
    earlier = plan.get("earlier_attempts")
    if not isinstance(earlier, list) or not earlier:
        return None
    steps = ", ".join(f"{s:,}" if isinstance(s, int) else "?" for s in earlier)
    if plan.get("earlier_noise") == "replayed":
        how = "This attempt replays their lots and noise (lab mode), so the ε curve charges those steps once."
    else:
        how = "They drew fresh noise (release mode), so their releases are composed into this run's ε, from step 0."
    restart = (run.result or {}).get("restart")
    alone = restart.get("epsilon_this_attempt") if isinstance(restart, dict) else None
    cost = f" This attempt alone: ε = {epsilon_text(alone)}." if isinstance(alone, int | float) else ""
    return (
        f"Restarted: {len(earlier)} earlier attempt(s) released {steps} step(s) (shown at the time) before the run "
        f"went back to the queue. {how}{cost}"
    )

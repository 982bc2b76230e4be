"""What a run that restarted has released: every earlier attempt's ledger, charged to the attempt that ends it.

A run restarts when its worker stops or is lost (the run goes back to the queue and trains again from step 0).
What an earlier attempt stored before it stopped (its per-step test accuracy, loss and ε) was shown, so it was
released, and the run's ledger must cover it:

- **fresh noise** (release mode): the new attempt draws new lots and new noise from the operating system, so an
  earlier attempt that released s steps is another mechanism run on the same data: its up-front releases and its
  first s steps are composed into the ledger as up-front releases (`charge_earlier_attempts`).
- **replayed noise** (lab mode): the new attempt regenerates the same lots and noise from the run's spec and
  recomputes the same releases, so its first s steps release nothing new: after t steps the run has released
  max(t, s) steps (`PrivacyLedger.replayed_steps`).

An attempt that stored nothing released nothing and is not charged. The contract: for every t, the ledger of
the new attempt after t steps, with its earlier attempts charged, covers everything the run released so far.
"""

from collections.abc import Sequence
from dataclasses import replace

from engine.privacy.accountants.curve import epsilon_text
from engine.privacy.errors import PrivacyError
from engine.privacy.ledger import PrivacyLedger


def charge_earlier_attempts(ledger: PrivacyLedger, attempts: Sequence[int], *, replayed: bool) -> PrivacyLedger:
    """`ledger` (one attempt's, every step) with earlier attempts charged: `attempts` holds the steps each earlier
    attempt that released anything released (0: only its up-front releases and its evaluation before training);
    `replayed`: the attempts drew the same noise as this one (lab mode), else fresh noise (release mode)."""
    if any(int(s) != s or s < 0 for s in attempts):
        raise PrivacyError(f"an earlier attempt's steps must be non-negative integers, got {list(attempts)}")
    if not attempts:
        return ledger
    charged = [min(int(s), ledger.steps) for s in attempts]
    if replayed:
        return replace(ledger, replayed_steps=max(ledger.replayed_steps, *charged))
    earlier = tuple(
        replace(
            release, label=f"attempt {number} of {len(charged) + 1}, stopped after {steps:,} steps: {release.label}"
        )
        for number, steps in enumerate(charged, 1)
        for release in ledger.truncated(steps).releases
        if release.count
    )
    return replace(ledger, upfront=earlier + ledger.upfront)


def restart_sentence(attempts: Sequence[int], *, replayed: bool, epsilon: float, epsilon_alone: float) -> str:
    """The privacy statement's line on a restarted run: what its earlier attempts released and what they cost."""
    runs = ", ".join(f"{s:,}" for s in attempts)
    plural = "s" * (len(attempts) != 1)
    if replayed:
        return (
            f"Restarted: {len(attempts)} earlier attempt{plural} released {runs} step(s) before stopping; lab mode "
            "replays the same noise, so those steps are charged once (the ε above covers max(steps) of any attempt; "
            f"this attempt alone: ε = {epsilon_text(epsilon_alone)})."
        )
    return (
        f"Restarted: {len(attempts)} earlier attempt{plural} released {runs} step(s) with their own fresh noise "
        f"before stopping; they are composed into the ε above (ε = {epsilon_text(epsilon)}, where this attempt "
        f"alone would be ε = {epsilon_text(epsilon_alone)})."
    )

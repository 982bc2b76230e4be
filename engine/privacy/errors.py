"""Named errors of the privacy ledger."""


class PrivacyError(ValueError):
    """A privacy computation was asked something it cannot answer honestly (bad argument, ...)."""


def check_delta(delta: float) -> None:
    """δ must lie strictly between 0 and 1 for any (ε, δ) statement here."""
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in (0, 1), got {delta}")


class UnreachableTargetError(PrivacyError):
    """A privacy target cannot be met within the allowed parameter range."""


class NotApplicableError(PrivacyError):
    """This accountant has no valid analysis for this mechanism (the message says why)."""


class NoTightAnalysisError(PrivacyError):
    """The mechanism has no known tight analysis (e.g. shuffle-and-iterate lots): no ε is reported."""

"""Named errors of the privacy ledger."""


class PrivacyError(ValueError):
    """A privacy computation was asked something it cannot answer honestly (bad argument, ...)."""


class UnreachableTargetError(PrivacyError):
    """A privacy target cannot be met within the allowed parameter range."""


class NotApplicableError(PrivacyError):
    """This accountant has no valid analysis for this mechanism (the message says why)."""


class NoTightAnalysisError(PrivacyError):
    """The mechanism has no known tight analysis (e.g. shuffle-and-iterate lots): no ε is reported."""

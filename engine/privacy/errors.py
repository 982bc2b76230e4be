"""Named errors of the privacy ledger."""


class PrivacyError(ValueError):
    """A privacy computation was asked something it cannot answer honestly."""


class UnreachableTargetError(PrivacyError):
    """A privacy target cannot be met within the allowed parameter range."""

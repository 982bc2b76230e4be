"""Warnings of the accounting libraries, kept out of terminals and server logs: at most one line per kind.

dp_accounting's RDP accountant logs (through absl) one warning per order at which its series for a fractional
order fails to converge, dozens per evaluation at extreme sampling rates or noise, and a calibration evaluates it
hundreds of times. Such an order gets RDP ∞ and drops out of the minimum over orders; ε over the remaining orders
is still a valid upper bound (any subset of orders gives one; Mironov 2017, Prop. 3), so these are dropped
without a line. Any other warning of theirs is shown once per message template per process.
"""

import logging

SILENT_PREFIXES = ("_compute_log_a_frac failed to converge",)
LIBRARY_LOGGERS = ("absl",)


class OncePerKind(logging.Filter):
    """Drops the silent kinds, and any repeat of a message template already shown."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        template = str(record.msg)
        if template.startswith(SILENT_PREFIXES) or template in self.shown:
            return False
        self.shown.add(template)
        return True


def install() -> None:
    """Put one `OncePerKind` filter on each library logger (idempotent)."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerKind) for f in logger.filters):
            logger.addFilter(OncePerKind())

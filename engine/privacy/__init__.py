"""Privacy accounting: what a run did to private data, as an immutable DP event, and its ε.

Pure functions over `dp_accounting` events. This package never imports torch (a test enforces it).
"""

from engine.privacy.calibration import calibrate_noise_multiplier
from engine.privacy.errors import PrivacyError, UnreachableTargetError
from engine.privacy.events import dpsgd_event, dpsgd_step_event
from engine.privacy.rdp import DEFAULT_ORDERS, EpsilonCurve, rdp_epsilon, rdp_epsilon_curve

__all__ = [
    "DEFAULT_ORDERS",
    "EpsilonCurve",
    "PrivacyError",
    "UnreachableTargetError",
    "calibrate_noise_multiplier",
    "dpsgd_event",
    "dpsgd_step_event",
    "rdp_epsilon",
    "rdp_epsilon_curve",
]

"""Privacy accounting: what a run did to private data, as immutable values, and its ε by every
accountant. Pure functions over `dp_accounting` events; this package never imports torch (a test
enforces it).

- `events`: one DP event per mechanism occurrence (DP-SGD step, noisy GD, DP-PCA, Laplace, ...).
- `ledger`: a run's releases in order (up-front releases, then phases of identical steps).
- `accountants`: RDP, PLD, naive and advanced composition, zCDP, and the exact optimal composition of pure
  ε-DP releases: ε(δ) after each step.
- `calibration`: σ for a target ε and the largest step count within a budget, by any accountant.
- `planning`: the (q, T) schedule of a run (T steps at sampling rate q = L/N) and its step caps.
- `statement`: the plain-language privacy statement of a run.
"""

from engine.privacy.accountants import ACCOUNTANTS, EpsilonCurve, Panel, accountant, describe_accountants, panel
from engine.privacy.accountants.curve import UNBOUNDED_EPSILON, epsilon_text, is_unbounded
from engine.privacy.accountants.rdp import DEFAULT_ORDERS
from engine.privacy.accountants.rdp import curve as rdp_curve
from engine.privacy.accountants.rdp import epsilon as rdp_epsilon
from engine.privacy.calibration import (
    SIGMA_MAX,
    SIGMA_MIN,
    calibrate_noise_multiplier,
    calibrate_sigma,
    fill_steps,
    final_epsilon,
    max_steps,
)
from engine.privacy.errors import NotApplicableError, NoTightAnalysisError, PrivacyError, UnreachableTargetError
from engine.privacy.events import (
    PureDpEvent,
    Sampling,
    dp_pca_event,
    dpsgd_event,
    dpsgd_step_event,
    exponential_mechanism_event,
    gaussian_event,
    laplace_event,
    noisy_gd_events,
)
from engine.privacy.ledger import PrivacyLedger, Release, schedule, single_phase
from engine.privacy.statement import PrivacyStatement, privacy_statement


def rdp_epsilon_curve(step_event, *, steps: int, delta: float) -> EpsilonCurve:
    """ε by RDP after each of `steps` identical steps."""
    return rdp_curve(single_phase(step_event, steps), delta=delta)


__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_ORDERS",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "UNBOUNDED_EPSILON",
    "EpsilonCurve",
    "NoTightAnalysisError",
    "NotApplicableError",
    "Panel",
    "PrivacyError",
    "PrivacyLedger",
    "PrivacyStatement",
    "PureDpEvent",
    "Release",
    "Sampling",
    "UnreachableTargetError",
    "accountant",
    "calibrate_noise_multiplier",
    "calibrate_sigma",
    "describe_accountants",
    "dp_pca_event",
    "dpsgd_event",
    "dpsgd_step_event",
    "epsilon_text",
    "exponential_mechanism_event",
    "fill_steps",
    "final_epsilon",
    "gaussian_event",
    "is_unbounded",
    "laplace_event",
    "max_steps",
    "noisy_gd_events",
    "panel",
    "privacy_statement",
    "rdp_curve",
    "rdp_epsilon",
    "rdp_epsilon_curve",
    "schedule",
    "single_phase",
]

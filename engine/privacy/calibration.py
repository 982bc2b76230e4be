"""Calibration: the smallest noise multiplier σ whose run meets a target (ε, δ).

A thin shell over `dp_accounting.calibrate_dp_mechanism` (Brent's method, returning a value on the
private side of the target), with the search confined to [SIGMA_MIN, SIGMA_MAX] and a named error
when the target cannot be met there.
"""

from dp_accounting import calibrate_dp_mechanism
from dp_accounting.mechanism_calibration import ExplicitBracketInterval
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from engine.privacy.errors import PrivacyError, UnreachableTargetError
from engine.privacy.events import dpsgd_event
from engine.privacy.rdp import DEFAULT_ORDERS, rdp_epsilon

SIGMA_MIN = 0.05
SIGMA_MAX = 500.0


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    tolerance: float = 1e-4,
) -> float:
    """σ such that `steps` DP-SGD steps at `sampling_rate` have RDP ε(δ) ≤ `target_epsilon`."""
    if not target_epsilon > 0:
        raise PrivacyError(f"target_epsilon must be > 0, got {target_epsilon}")
    if steps < 1:
        raise PrivacyError(f"steps must be >= 1, got {steps}")

    def event(sigma: float):
        return dpsgd_event(sampling_rate=sampling_rate, noise_multiplier=sigma, steps=steps)

    eps_at_max, _ = rdp_epsilon(event(SIGMA_MAX), delta=delta)
    if eps_at_max > target_epsilon:
        raise UnreachableTargetError(
            f"target_epsilon={target_epsilon:g} is unreachable: even noise_multiplier={SIGMA_MAX:g} "
            f"gives ε={eps_at_max:.3g} over {steps} steps at q={sampling_rate:.4g}; "
            "raise target_epsilon or delta, or train fewer steps / smaller lots"
        )
    eps_at_min, _ = rdp_epsilon(event(SIGMA_MIN), delta=delta)
    if eps_at_min <= target_epsilon:
        return SIGMA_MIN
    sigma = calibrate_dp_mechanism(
        lambda: rdp_lib.RdpAccountant(orders=list(DEFAULT_ORDERS)),
        event,
        target_epsilon,
        delta,
        ExplicitBracketInterval(SIGMA_MIN, SIGMA_MAX),
        tol=tolerance,
    )
    achieved, _ = rdp_epsilon(event(sigma), delta=delta)
    if achieved > target_epsilon:  # calibrate_dp_mechanism guarantees this; never trust silently.
        raise PrivacyError(f"calibration returned σ={sigma} with ε={achieved} > {target_epsilon}")
    return float(sigma)

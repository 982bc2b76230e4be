"""Calibration and planning, by any accountant: the smallest σ that meets a target (ε, δ), and the
largest number of steps that fits a budget.

For RDP and PLD this is `dp_accounting.calibrate_dp_mechanism` (Brent's method, returning a value
on the private side of the target); for the textbook compositions the same search over their pure
functions. Errors, never garbage: a target unreachable within [SIGMA_MIN, SIGMA_MAX], or a budget
smaller than one step costs, raises `UnreachableTargetError`.
"""

from collections.abc import Callable
from functools import cache

from dp_accounting import calibrate_dp_mechanism
from dp_accounting.mechanism_calibration import ExplicitBracketInterval

from engine.privacy.accountants import accountant, pld, rdp
from engine.privacy.errors import PrivacyError, UnreachableTargetError, check_delta
from engine.privacy.events import dpsgd_step_event
from engine.privacy.ledger import PrivacyLedger, single_phase

SIGMA_MIN = 0.05
SIGMA_MAX = 500.0
MAX_STEPS = 10_000_000


def final_epsilon(ledger: PrivacyLedger, *, delta: float, accountant_name: str = "rdp") -> float:
    if accountant_name == "pld":
        return pld.epsilon_of(ledger, delta=delta)
    return accountant(accountant_name).curve(ledger, delta=delta, steps=[ledger.steps]).final_epsilon


def _check_target(target_epsilon: float, delta: float) -> None:
    if not target_epsilon > 0:
        raise PrivacyError(f"target_epsilon must be > 0, got {target_epsilon}")
    check_delta(delta)


def calibrate_sigma(
    make_ledger: Callable[[float], PrivacyLedger],
    *,
    target_epsilon: float,
    delta: float,
    accountant_name: str = "rdp",
    tolerance: float = 1e-4,
) -> float:
    """The smallest σ in [SIGMA_MIN, SIGMA_MAX] (to a relative `tolerance`) with ε(δ) ≤ target_epsilon."""
    _check_target(target_epsilon, delta)
    accountant(accountant_name)  # a named error for an unknown accountant

    @cache  # the bracket checks revisit σ values; a PLD evaluation costs ~0.1–1 s
    def eps(sigma: float) -> float:
        return final_epsilon(make_ledger(sigma), delta=delta, accountant_name=accountant_name)

    low, high = SIGMA_MIN, SIGMA_MAX
    if accountant_name != "rdp":
        # RDP is cheap to calibrate and brackets the others: PLD is tighter (σ_pld ≤ σ_rdp), the
        # composition theorems looser (σ ≥ σ_rdp). Small σ, where PLD is slowest, is never evaluated.
        sigma_rdp = calibrate_sigma(make_ledger, target_epsilon=target_epsilon, delta=delta, tolerance=tolerance)
        low, high = (sigma_rdp / 2, sigma_rdp) if accountant_name == "pld" else (sigma_rdp, SIGMA_MAX)
        if accountant_name == "pld" and eps(high) > target_epsilon:
            low, high = sigma_rdp, SIGMA_MAX  # discretization made PLD looser than RDP here
        if low > SIGMA_MIN and eps(low) <= target_epsilon:
            low = SIGMA_MIN
    at_high = eps(high)
    if at_high > target_epsilon:
        raise UnreachableTargetError(
            f"target_epsilon={target_epsilon:g} is unreachable: even noise_multiplier={high:g} gives "
            f"ε={at_high:.3g} by the {accountant_name} accountant; raise target_epsilon or delta, or train "
            "fewer steps / smaller lots"
        )
    if low == SIGMA_MIN and eps(SIGMA_MIN) <= target_epsilon:
        return SIGMA_MIN
    if accountant_name in ("rdp", "pld"):
        make_accountant = {"rdp": rdp.RdpAccountant, "pld": lambda: pld.PldAccountant(
            value_discretization_interval=pld.GRID_DISCRETIZATION)}[accountant_name]  # fmt: skip
        sigma = calibrate_dp_mechanism(
            make_accountant, lambda s: make_ledger(s).dp_event(), target_epsilon, delta,
            ExplicitBracketInterval(low, high), tol=tolerance * low,
        )  # fmt: skip
    else:
        sigma = _bisect_feasible(eps, target_epsilon, low, high, tolerance)
    if eps(sigma) > target_epsilon:  # the libraries guarantee this; never trust silently
        raise PrivacyError(f"calibration returned σ={sigma} with ε > {target_epsilon}")
    return float(sigma)


def _bisect_feasible(eps: Callable[[float], float], target: float, low: float, high: float, tolerance: float) -> float:
    """Bisection in log σ on a decreasing ε(σ), keeping `high` feasible (ε(high) ≤ target), to a
    relative `tolerance`."""
    while high / low - 1 > tolerance:
        middle = (low * high) ** 0.5
        if eps(middle) <= target:
            high = middle
        else:
            low = middle
    return high


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    accountant_name: str = "rdp",
    tolerance: float = 1e-4,
) -> float:
    """σ such that `steps` Poisson DP-SGD steps at `sampling_rate` have ε(δ) ≤ `target_epsilon`."""
    if int(steps) != steps or steps < 1:
        raise PrivacyError(f"steps must be an integer >= 1, got {steps}")

    def ledger(sigma: float) -> PrivacyLedger:
        return single_phase(dpsgd_step_event(sampling_rate=sampling_rate, noise_multiplier=sigma), int(steps))

    return calibrate_sigma(ledger, target_epsilon=target_epsilon, delta=delta, accountant_name=accountant_name,
                           tolerance=tolerance)  # fmt: skip


def max_steps(
    make_ledger: Callable[[int], PrivacyLedger],
    *,
    target_epsilon: float,
    delta: float,
    accountant_name: str = "rdp",
    limit: int = MAX_STEPS,
) -> int:
    """The largest number of steps whose ε(δ) fits the budget."""
    _check_target(target_epsilon, delta)

    def fits(steps: int) -> bool:
        return final_epsilon(make_ledger(steps), delta=delta, accountant_name=accountant_name) <= target_epsilon

    if not fits(1):
        raise UnreachableTargetError(
            f"the budget ε={target_epsilon:g} is smaller than one step costs by the {accountant_name} accountant"
        )
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    if high > limit:
        return limit if fits(limit) else _largest_fitting(fits, low, limit)
    return _largest_fitting(fits, low, high)


def _largest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int:
    """fits(low) holds and fits(high) does not: binary search for the boundary."""
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low

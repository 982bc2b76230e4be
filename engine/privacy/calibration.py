"""Calibration and planning, by any accountant: the smallest σ that meets a target (ε, δ), and the
largest number of steps that fits a budget.

For RDP a two-stage Brent search over dp_accounting's RDP; for PLD Brent's method over the adaptive
PLD (`accountants.pld.adaptive_epsilon`), the same function that reports ε; for the textbook
compositions a bisection over their pure functions. Every search returns a σ on the private side of
the target. Errors, never garbage: a target unreachable within [SIGMA_MIN, SIGMA_MAX], or a budget
smaller than one step costs, raises `UnreachableTargetError`.

Bounded work: a search by PLD (up to a few seconds an evaluation at 10⁷ steps) evaluates a discretized PLD
at most `PLD_EVALUATION_BUDGET` times (the exact Gaussian closed form, q = 1, is not counted). Where ε(σ) is
far from smooth (the adaptive PLD when q·T ≪ 1, where a discretization rung decides ε) Brent's method may need
more; then the smallest σ confirmed feasible so far is returned: still on the private side of the target, only
less close to the threshold. (The composition theorems cost at most one single-step profile an evaluation,
whatever T; RDP and zCDP are closed forms.)
"""

import math
from collections.abc import Callable
from functools import cache

import numpy as np
from scipy.optimize import brentq

from engine.privacy.accountants import accountant, gaussian, pld, rdp
from engine.privacy.errors import PrivacyError, UnreachableTargetError, check_delta
from engine.privacy.events import dpsgd_step_event
from engine.privacy.ledger import PrivacyLedger, single_phase
from engine.privacy.limits import MAX_ACCOUNTED_STEPS, SIGMA_MAX, SIGMA_MIN

MAX_STEPS = MAX_ACCOUNTED_STEPS
PLD_EVALUATION_BUDGET = 6  # adaptive PLD evaluations of one σ search
HINT_SLACK = 0.01  # a σ hint is taken when it spends at least 99% of the target ε, and never more than all of it


def final_epsilon(ledger: PrivacyLedger, *, delta: float, accountant_name: str = "rdp") -> float:
    if accountant_name == "pld":
        return pld.epsilon_of(ledger, delta=delta)
    return accountant(accountant_name).curve(ledger, delta=delta, steps=[ledger.steps]).final_epsilon


def _check_target(target_epsilon: float, delta: float) -> None:
    if not 0 < target_epsilon < math.inf:
        raise PrivacyError(f"target_epsilon must be a finite number > 0, got {target_epsilon}")
    check_delta(delta)


def calibrate_sigma(
    make_ledger: Callable[[float], PrivacyLedger],
    *,
    target_epsilon: float,
    delta: float,
    accountant_name: str = "rdp",
    tolerance: float = 1e-4,
    hint: float | None = None,
) -> float:
    """The smallest σ in [SIGMA_MIN, SIGMA_MAX] (to a relative `tolerance`) with ε(δ) ≤ target_epsilon.

    `hint`: a σ calibrated elsewhere for the same ledger (the dashboard plans a run before a worker trains
    it). It is checked, never trusted: it is returned only if this accountant finds ε(hint) ≤ target and
    ε(hint) ≥ (1 − HINT_SLACK) · target (not needlessly noisy); otherwise σ is calibrated here."""
    _check_target(target_epsilon, delta)
    accountant(accountant_name)  # a named error for an unknown accountant

    feasible: list[float] = []  # every σ evaluated with ε(σ) ≤ target

    @cache  # the bracket checks revisit σ values; a PLD evaluation costs ~0.1–3 s
    def eps(sigma: float) -> float:
        ledger = make_ledger(sigma)
        discretized = accountant_name == "pld" and gaussian.ledger_mus(ledger, [ledger.steps]) is None
        if discretized and eps.cache_info().currsize >= PLD_EVALUATION_BUDGET:
            raise _BudgetSpentError
        value = final_epsilon(ledger, delta=delta, accountant_name=accountant_name)
        if value <= target_epsilon:
            feasible.append(sigma)
        return value

    confirmed = hint is not None and SIGMA_MIN <= hint <= SIGMA_MAX
    if confirmed and (1 - HINT_SLACK) * target_epsilon <= eps(hint) <= target_epsilon:
        return float(hint)

    low, high = SIGMA_MIN, SIGMA_MAX
    if accountant_name != "rdp":
        # RDP is cheap to calibrate and brackets the others: PLD is tighter (σ_pld ≤ σ_rdp), the
        # composition theorems looser (σ ≥ σ_rdp). Small σ, where PLD is slowest, is never evaluated.
        try:
            sigma_rdp = calibrate_sigma(make_ledger, target_epsilon=target_epsilon, delta=delta, tolerance=tolerance)
        except UnreachableTargetError:
            if accountant_name != "pld":
                raise  # the composition theorems are looser than RDP
            sigma_rdp = SIGMA_MAX  # PLD may still reach it: the search below checks SIGMA_MAX itself
        low, high = (max(SIGMA_MIN, sigma_rdp / 2), sigma_rdp) if accountant_name == "pld" else (sigma_rdp, SIGMA_MAX)
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
    try:
        if accountant_name == "rdp":
            sigma = _calibrate_rdp(make_ledger, eps, target_epsilon, delta, tolerance)
        elif accountant_name == "pld":
            # Brent's method on the adaptive PLD itself (the function every page reports), not on one fixed
            # interval: the σ returned spends the target by the very ε that is shown for it.
            sigma = _brent_feasible(eps, target_epsilon, low, high, tolerance)
        else:
            sigma = _bisect_feasible(eps, target_epsilon, low, high, tolerance)
    except _BudgetSpentError:
        sigma = min(feasible)  # ε(high) ≤ target was evaluated before the search: never empty
    if eps(sigma) > target_epsilon:  # the libraries guarantee this; never trust silently
        raise PrivacyError(f"calibration returned σ={sigma} with ε > {target_epsilon}")
    return float(sigma)


class _BudgetSpentError(Exception):
    """A PLD σ search used its PLD_EVALUATION_BUDGET (never leaves this module)."""


INTEGER_ORDERS: tuple[float, ...] = tuple(a for a in rdp.DEFAULT_ORDERS if float(a).is_integer())


def _calibrate_rdp(
    make_ledger: Callable[[float], PrivacyLedger],
    eps: Callable[[float], float],
    target: float,
    delta: float,
    tolerance: float,
) -> float:
    """RDP calibration in two stages, each evaluation by dp_accounting's RDP of the ledger's events.

    1. Over the integer orders only (dp_accounting computes those ~5× faster than the fractional ones,
       which at small σ iterate 1000 times and are then dropped). ε over a subset of orders is an
       upper bound on ε over all of them, so the σ found, σ_int, is feasible for the full set.
    2. If the fractional orders give no smaller ε at σ_int, the full set's threshold is σ_int too
       (ε only grows as σ shrinks), and it is returned. Otherwise the integer orders plus the
       fractional ones near the best order at σ_int are searched below σ_int: still an upper bound.
    """

    @cache
    def eps_int(sigma: float) -> float:
        return float(
            rdp.curve(
                make_ledger(sigma), delta=delta, steps=[make_ledger(sigma).steps], orders=INTEGER_ORDERS
            ).final_epsilon
        )

    low, high = _doubling_bracket(eps_int, target)
    sigma_int = _brent_feasible(eps_int, target, low, high, tolerance)
    if eps(sigma_int) >= eps_int(sigma_int):  # `eps` is cached: the caller's final check is free
        return sigma_int
    full = rdp.curve(make_ledger(sigma_int), delta=delta, steps=[make_ledger(sigma_int).steps])
    # The fractional orders near the best one at σ_int (plus every integer order): any subset of orders
    # gives a valid bound, and this one holds the orders that can be best a few percent below σ_int.
    best = full.final_order
    near = tuple(a for a in rdp.DEFAULT_ORDERS if float(a).is_integer() or best / 1.5 <= a <= best * 1.5)

    @cache
    def eps_near(sigma: float) -> float:
        return float(
            rdp.curve(make_ledger(sigma), delta=delta, steps=[make_ledger(sigma).steps], orders=near).final_epsilon
        )

    low = max(SIGMA_MIN, sigma_int * 0.9)
    if eps_near(low) <= target:
        return _bisect_feasible(eps_near, target, max(SIGMA_MIN, sigma_int / 2), sigma_int, tolerance)
    return _brent_feasible(eps_near, target, low, sigma_int, tolerance)


def _brent_feasible(eps: Callable[[float], float], target: float, low: float, high: float, tolerance: float) -> float:
    """Brent's method on ε(σ) − target in log σ (a handful of evaluations where bisection needs a dozen),
    given ε(low) > target ≥ ε(high); then the feasible side: the σ returned has ε(σ) ≤ target and is
    within a relative `tolerance` of the threshold."""
    root = brentq(
        lambda log_sigma: eps(math.exp(log_sigma)) - target,
        math.log(low),
        math.log(high),
        xtol=tolerance / 4,
        rtol=4 * np.finfo(float).eps,
    )
    sigma = math.exp(root)
    for _ in range(4):
        if eps(sigma) <= target:
            return min(sigma, high)
        sigma *= 1 + tolerance / 4
    return high


def _doubling_bracket(eps: Callable[[float], float], target: float) -> tuple[float, float]:
    """(low, high) within [SIGMA_MIN, SIGMA_MAX], a factor 2 apart, with ε(high) ≤ target < ε(low)
    (low = SIGMA_MIN when even that is feasible). The caller has checked that SIGMA_MAX is feasible."""
    sigma = 1.0
    if eps(sigma) <= target:
        while sigma / 2 >= SIGMA_MIN and eps(sigma / 2) <= target:
            sigma /= 2
        return max(SIGMA_MIN, sigma / 2), sigma
    while sigma < SIGMA_MAX and eps(sigma) > target:
        sigma = min(2 * sigma, SIGMA_MAX)
    return sigma / 2, sigma


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

    return calibrate_sigma(
        ledger, target_epsilon=target_epsilon, delta=delta, accountant_name=accountant_name, tolerance=tolerance
    )


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


BUDGET_ACCOUNTANTS = ("rdp", "pld")  # a budget is filled by whichever allows more steps (each ε is a valid bound)
GALLOP = 1.25  # PLD's search steps up from RDP's count by this factor (PLD allows somewhat more steps, rarely fewer)


def fill_steps(
    make_ledger: Callable[[int], PrivacyLedger], *, target_epsilon: float, delta: float, limit: int = MAX_STEPS
) -> tuple[int, str]:
    """(steps, accountant): the most steps, up to `limit`, whose ε(δ) fits the budget by RDP or by PLD, whichever
    allows more, and which one did (RDP on a tie). Every accountant's ε is a valid upper bound, so those steps
    stay within the target by the tightest accountant's ε too. RDP (a closed form) is searched first; PLD's search
    (seconds per evaluation at 10⁴ steps) starts from RDP's count and gallops up by `GALLOP`. Raises
    `UnreachableTargetError` when one step exceeds the budget by both."""
    _check_target(target_epsilon, delta)
    try:
        by_rdp = max_steps(make_ledger, target_epsilon=target_epsilon, delta=delta, limit=limit)
    except UnreachableTargetError:
        by_rdp = 0

    def fits(steps: int) -> bool:
        return final_epsilon(make_ledger(steps), delta=delta, accountant_name="pld") <= target_epsilon

    if by_rdp == 0:
        try:
            return max_steps(
                make_ledger, target_epsilon=target_epsilon, delta=delta, accountant_name="pld", limit=limit
            ), "pld"
        except UnreachableTargetError:
            raise UnreachableTargetError(
                f"the budget ε={target_epsilon:g} is smaller than one step costs by the RDP and PLD accountants"
            ) from None
    if by_rdp >= limit or not fits(by_rdp + 1):
        return by_rdp, "rdp"
    low, high = by_rdp + 1, min(limit, math.ceil((by_rdp + 1) * GALLOP))
    while fits(high):
        if high >= limit:
            return limit, "pld"
        low, high = high, min(limit, math.ceil(high * GALLOP))
    return _largest_fitting(fits, low, high), "pld"


def _largest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int:
    """fits(low) holds and fits(high) does not: binary search for the boundary."""
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low

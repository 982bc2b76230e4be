"""What a run's guarantee means for an attacker: the hypothesis-testing view of differential privacy.

A membership-inference attack is a test between two neighbouring datasets ("the example is in" against "it is
out"); its false-positive rate α (non-members wrongly accused) and true-positive rate (members caught) are bounded
by the mechanism's guarantee. An (ε, δ)-DP mechanism lets no test reach a power above

    TPR(α) ≤ min(1, e^ε α + δ, 1 − e^{−ε}(1 − δ − α))

(Kairouz, Oh & Viswanath 2015, after Wasserman & Zhou 2010; Dong, Roth & Su 2019, Prop. 2.5: (ε, δ)-DP is
f_{ε,δ}-DP with f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)), and power = 1 − type II error). The
bound holds with the roles of the two datasets swapped (f_{ε,δ} is symmetric: (ε, δ)-DP bounds both directions),
so it covers an attacker who tests "in" against "out" and one who tests "out" against "in". A mechanism that is
(εᵢ, δ(εᵢ))-DP for every εᵢ of a privacy profile is f_{εᵢ,δᵢ}-DP for each, so its attacks obey the minimum of
these bounds (Dong et al. 2019, Prop. 2.12: over every ε ≥ 0 the minimum is the exact symmetric trade-off curve).

Contract:
- `power_bound(epsilons, deltas, alphas)`: that minimum at each α, for a profile given on a grid of ε ≥ 0.
  Every value is a valid upper bound whatever the grid; a grid of spacing h that contains 0 and reaches past the
  optimal ε of α gives at most e^h times the exact curve's value there (proof: at the optimal ε* the branch
  e^ε α + δ(ε) has derivative e^ε (α − Q(L > ε)) ≥ 0 above ε*, so the next grid point adds at most
  α(e^{ε*+h} − e^{ε*}) ≤ (e^h − 1)·TPR(α); the other branch adds at most (e^h − 1)·α ≤ (e^h − 1)·TPR(α)).
- `privacy_profile(ledger, accountant=, epsilon=, delta=)`: δ(ε) of a run's ledger on `PROFILE_POINTS` values of ε
  from 0 to `profile_top(epsilon)` (ε: the run's at its δ), by PLD (dp_accounting's pessimistic PLD at the
  discretization interval the PLD accountant settles on for the run, every δ a valid upper bound; the exact
  Balle & Wang 2018 profile for Gaussian releases that are not subsampled, as the PLD accountant itself uses) or
  RDP (dp_accounting's `compute_delta`, the conversion of Canonne, Kamath & Steinke 2020, Prop. 12, vectorized).
  Raises `NotApplicableError` when the accountant does not apply.
- `attack_bound(ledger, accountant=, epsilon=, delta=)`: the curve of a finished run, from its tightest accountant's
  profile (the run's own, if PLD or RDP; else PLD, then RDP); when none applies, the trivial curve TPR = 1 with
  `accountant` None. The curve is stored as the vertices of a polyline that is itself a valid bound at every α,
  not only at its vertices (`bound_polyline`), and that equals the bound at each of `FPR_SAMPLES`.
- `attack_sentence(bound)`: the privacy statement's sentence, the power at `ACCUSED` (1%) rounded up.
Errors: `TradeoffError` (a malformed profile or stored curve), `NotApplicableError`.
"""

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.privacy.accountants import ACCOUNTANTS, gaussian, pld, rdp
from engine.privacy.accountants.curve import is_unbounded
from engine.privacy.errors import NotApplicableError, PrivacyError
from engine.privacy.ledger import PrivacyLedger

PROFILE_ACCOUNTANTS = ("pld", "rdp")  # the accountants that give δ at any ε; the run's tightest of them is used
PROFILE_POINTS = 2001  # ε grid of the profile: spacing h = top/2000, so the curve is within e^h of the exact one
PROFILE_TOP_MIN, PROFILE_TOP_MAX = 2.0, 100.0  # the grid reaches 2ε + 1 of the run, within these
ACCUSED = 0.01  # the statement's false-positive rate: 1% of non-members wrongly accused
FPR_SAMPLES = np.unique(
    np.concatenate([[0.0, ACCUSED], np.geomspace(1e-6, 0.1, 31), np.linspace(0.1, 1.0, 46)])
)  # 77 rates: log-spaced where the curve climbs fastest, then every 0.02
ROUNDING_MARGIN = 1e-9  # every computed δ is raised by this much (relative) against rounding


class TradeoffError(PrivacyError):
    """A privacy profile or a stored attack curve that is not one (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class PrivacyProfile:
    epsilons: np.ndarray  # ascending, the first 0
    deltas: np.ndarray  # a valid δ(εᵢ) for each
    accountant: str


@dataclass(frozen=True, kw_only=True)
class AttackBound:
    """The highest TPR any membership-inference attack reaches at each FPR: a polyline through (fpr, tpr)
    (vertices, fpr from 0 to 1) that is a valid upper bound at every FPR. `accountant` None: no accountant bounds
    the run, and the curve is the trivial TPR = 1."""

    fpr: tuple[float, ...]
    tpr: tuple[float, ...]
    accountant: str | None

    def tpr_at(self, alpha: float) -> float:
        return float(np.interp(alpha, self.fpr, self.tpr))

    @property
    def bounded(self) -> bool:
        """Whether the curve rules out any attack (some TPR below 1)."""
        return self.accountant is not None and min(self.tpr) < 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"fpr": list(self.fpr), "tpr": list(self.tpr), "accountant": self.accountant}

    @classmethod
    def from_dict(cls, stored: Any) -> "AttackBound":
        """A stored curve (`to_dict`), checked: TradeoffError when it is not one."""
        if not isinstance(stored, Mapping):
            raise TradeoffError("an attack curve is an object with fpr, tpr and accountant")
        fpr, tpr, name = stored.get("fpr"), stored.get("tpr"), stored.get("accountant")
        if name is not None and name not in PROFILE_ACCOUNTANTS:
            raise TradeoffError(f"unknown accountant {name!r}")
        numbers = all(
            isinstance(v, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
            for v in (fpr, tpr)
        )
        if not numbers or len(fpr) != len(tpr) or len(fpr) < 2:
            raise TradeoffError("fpr and tpr must be lists of numbers of the same length (at least 2)")
        x, y = np.asarray(fpr, dtype=float), np.asarray(tpr, dtype=float)
        if x[0] != 0.0 or x[-1] != 1.0 or np.any(np.diff(x) < 0) or np.any((y < 0) | (y > 1) | ~np.isfinite(y)):
            raise TradeoffError("fpr must rise from 0 to 1 and every tpr lie in [0, 1]")
        return cls(fpr=tuple(map(float, x)), tpr=tuple(map(float, y)), accountant=name)


TRIVIAL = AttackBound(fpr=(0.0, 1.0), tpr=(1.0, 1.0), accountant=None)


def check_profile(epsilons: np.ndarray, deltas: np.ndarray) -> None:
    if epsilons.ndim != 1 or epsilons.shape != deltas.shape or len(epsilons) == 0:
        raise TradeoffError("a privacy profile needs one δ for each ε (at least one)")
    if np.any(~np.isfinite(epsilons)) or np.any(epsilons < 0) or np.any(np.isnan(deltas)):
        raise TradeoffError("a privacy profile's ε must be finite and ≥ 0, and every δ a number")


def bound_lines(epsilons, deltas) -> tuple[np.ndarray, np.ndarray]:
    """(slopes, intercepts) of the lines whose minimum is the bound: e^ε α + δ and 1 − e^{−ε}(1 − δ − α) for each
    (ε, δ), and TPR = 1."""
    eps, delta = np.asarray(epsilons, dtype=np.float64), np.asarray(deltas, dtype=np.float64)
    check_profile(eps, delta)
    delta = np.clip(delta, 0.0, 1.0)
    slopes = np.concatenate([np.exp(eps), np.exp(-eps), [0.0]])
    intercepts = np.concatenate([delta, 1.0 - np.exp(-eps) * (1.0 - delta), [1.0]])
    return slopes, intercepts


def power_bound(epsilons, deltas, alphas) -> np.ndarray:
    """The highest TPR any test reaches at each FPR in `alphas`, for a mechanism (εᵢ, δᵢ)-DP for every i."""
    slopes, intercepts = bound_lines(epsilons, deltas)
    a = np.asarray(alphas, dtype=np.float64)
    if np.any((a < 0) | (a > 1)):
        raise TradeoffError("a false-positive rate lies in [0, 1]")
    return np.min(a[:, None] * slopes[None, :] + intercepts[None, :], axis=1)


def bound_polyline(epsilons, deltas, samples=FPR_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """The vertices of a polyline equal to `power_bound` at each of `samples` (sorted, from 0 to 1) and above it
    between them: the lower envelope of only the lines that bind at a sample. A minimum of fewer lines is a valid
    bound, and with them each binding line's stretch between samples is exact, so nothing is interpolated."""
    slopes, intercepts = bound_lines(epsilons, deltas)
    alphas = np.asarray(samples, dtype=np.float64)
    binding = np.argmin(alphas[:, None] * slopes[None, :] + intercepts[None, :], axis=1)
    xs, ys = [0.0], [float(intercepts[binding[0]])]
    for k in range(len(alphas) - 1):
        first, second = binding[k], binding[k + 1]
        if first == second or slopes[first] == slopes[second]:
            continue
        x = (intercepts[second] - intercepts[first]) / (slopes[first] - slopes[second])
        x = float(np.clip(x, alphas[k], alphas[k + 1]))
        # on both lines at their crossing, up to rounding: the larger keeps the polyline above each segment's line
        xs.append(x)
        ys.append(float(max(slopes[first] * x + intercepts[first], slopes[second] * x + intercepts[second])))
    xs.append(1.0)
    ys.append(float(slopes[binding[-1]] + intercepts[binding[-1]]))
    x, y = np.asarray(xs), np.minimum(np.asarray(ys), 1.0)
    keep = np.concatenate([[True], np.diff(x) > 0])
    return x[keep], y[keep]


def profile_top(epsilon: float) -> float:
    """The largest ε of a run's profile grid: 2ε + 1 of the run's ε at its δ, within [2, 100] (100 when ∞)."""
    if is_unbounded(epsilon) or math.isnan(epsilon):
        return PROFILE_TOP_MAX
    return float(np.clip(2.0 * epsilon + 1.0, PROFILE_TOP_MIN, PROFILE_TOP_MAX))


def pmf_deltas(pmf, epsilons: np.ndarray) -> np.ndarray:
    """δ(ε) of one direction of a discretized PLD at ascending ε: m + Σ_{Lⱼ>ε} pⱼ − e^ε Σ_{Lⱼ>ε} pⱼ e^{−Lⱼ}
    (dp_accounting's `_get_delta_for_epsilon_vectorized`, with suffix sums in place of its Python loop)."""
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=np.float64)
    losses = (np.arange(len(probs)) + dense._lower_loss) * dense._discretization
    upper = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])  # Σ_{j ≥ i} pⱼ
    lower = np.concatenate([np.cumsum((probs * np.exp(-losses))[::-1])[::-1], [0.0]])
    first = np.searchsorted(losses, epsilons, side="right")  # the first loss > ε
    return dense._infinity_mass + np.maximum(upper[first] - np.exp(epsilons) * lower[first], 0.0)


def pld_profile(ledger: PrivacyLedger, epsilons: np.ndarray, *, discretization: float) -> np.ndarray:
    """δ(ε) by dp_accounting's PLD of the whole ledger at one discretization interval (the larger of its two
    directions'); `pld.PldTooCostlyError` when that PLD would be too large."""
    accountant = pld.PldAccountant(
        neighboring_relation=ledger.neighboring, value_discretization_interval=discretization
    )
    event = ledger.dp_event()
    if not accountant.supports(event):
        raise NotApplicableError("the PLD accountant does not support this mechanism under this adjacency")
    distribution = accountant.compose(event).pld
    pmfs = [distribution._pmf_remove] + ([] if distribution._symmetric else [distribution._pmf_add])
    return np.max([pmf_deltas(pmf, epsilons) for pmf in pmfs], axis=0)


def pld_deltas(ledger: PrivacyLedger, epsilons: np.ndarray, *, delta: float) -> np.ndarray:
    """δ(ε) by PLD: exact for Gaussian releases that are not subsampled, else at the discretization interval the
    PLD accountant settles on for the run's ε(δ) (`pld.choose_discretization`, its adaptive ladder)."""
    mus = gaussian.ledger_mus(ledger, [ledger.steps])
    if mus is not None:
        mu = float(mus[0])
        return np.zeros(len(epsilons)) if mu == 0 else gaussian.delta_profile(1.0 / mu, epsilons)
    return pld_profile(ledger, epsilons, discretization=pld.choose_discretization(ledger, delta=delta))


def rdp_deltas(ledger: PrivacyLedger, epsilons: np.ndarray, orders: tuple[float, ...] = rdp.DEFAULT_ORDERS):
    """δ(ε) by RDP at each ε, from the ledger's RDP at `orders`: dp_accounting's `compute_delta` (the smaller of
    the KL bound √(1 − e^{−r}) and Canonne, Kamath & Steinke 2020, Prop. 12, over the orders), vectorized."""
    r = rdp.cumulative_rdp(ledger, [ledger.steps], orders)[0][None, :]
    a = np.asarray(orders, dtype=np.float64)[None, :]
    eps = np.asarray(epsilons, dtype=np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        kl = np.where(r > 0, 0.5 * np.log1p(-np.exp(-r)), -np.inf)
        conversion = (a - 1.0) * (r - eps + np.log1p(-1.0 / a)) - np.log(a)
        log_delta = np.where(a > 1.01, np.minimum(kl, conversion), kl)
        log_delta = np.where(np.isnan(log_delta), 0.0, log_delta)  # ∞ − ∞ at an unbounded order: no bound there
    return np.minimum(np.exp(np.min(log_delta, axis=1)), 1.0)


def privacy_profile(ledger: PrivacyLedger, *, accountant: str, epsilon: float, delta: float) -> PrivacyProfile:
    """The ledger's δ(ε) on `PROFILE_POINTS` ε from 0 to `profile_top(epsilon)` by `accountant` (pld or rdp);
    `epsilon`: the run's ε at its `delta`."""
    if accountant not in PROFILE_ACCOUNTANTS:
        raise NotApplicableError(f"no privacy profile by {accountant!r}: only by {', '.join(PROFILE_ACCOUNTANTS)}")
    epsilons = np.linspace(0.0, profile_top(epsilon), PROFILE_POINTS)
    deltas = pld_deltas(ledger, epsilons, delta=delta) if accountant == "pld" else rdp_deltas(ledger, epsilons)
    deltas = np.minimum(1.0, np.asarray(deltas, dtype=np.float64) * (1.0 + ROUNDING_MARGIN))
    return PrivacyProfile(epsilons=epsilons, deltas=deltas, accountant=accountant)


def attack_bound(ledger: PrivacyLedger, *, accountant: str | None, epsilon: float, delta: float) -> AttackBound:
    """A finished run's attack curve from its privacy profile: by `accountant` (the run's tightest) when it gives
    a profile, else PLD, then RDP; the trivial curve when none applies. `epsilon`: the run's ε at its `delta` (it
    sets the grid's reach and PLD's discretization). Memoized: the members of a stack often share a ledger."""
    try:
        return _attack_bound(ledger, accountant, epsilon, delta)
    except TypeError:  # a ledger that is not hashable
        return _attack_bound.__wrapped__(ledger, accountant, epsilon, delta)


@functools.lru_cache(maxsize=32)
def _attack_bound(ledger: PrivacyLedger, accountant: str | None, epsilon: float, delta: float) -> AttackBound:
    names = ((accountant,) if accountant in PROFILE_ACCOUNTANTS else ()) + PROFILE_ACCOUNTANTS
    for name in dict.fromkeys(names):
        try:
            profile = privacy_profile(ledger, accountant=name, epsilon=epsilon, delta=delta)
        except NotApplicableError:
            continue
        fpr, tpr = bound_polyline(profile.epsilons, profile.deltas)
        return AttackBound(fpr=tuple(map(float, fpr)), tpr=tuple(map(float, tpr)), accountant=name)
    return TRIVIAL


def percent_up(fraction: float) -> str:
    """A fraction as a percentage rounded up to 3 significant digits (a bound stays a bound): '4.37%'."""
    percent = 100.0 * fraction
    if percent >= 100.0:
        return "100%"
    digits = 2 - math.floor(math.log10(percent)) if percent > 0 else 2
    return f"{math.ceil(percent * 10**digits - 1e-9) / 10**digits:.{max(digits, 0)}f}%"


def attack_sentence(bound: AttackBound) -> str:
    """What the curve says at 1% false positives, in the privacy statement's words."""
    accused = f"{ACCUSED:.0%}"
    if bound.accountant is None:
        return (
            f"No accountant bounds this run's privacy profile: an attacker who wrongly accuses {accused} of "
            "non-members may catch every member (no membership-inference attack is ruled out)."
        )
    caught = bound.tpr_at(ACCUSED)
    if caught >= 1.0:
        return (
            f"An attacker who wrongly accuses {accused} of non-members may catch every member: at that rate this "
            f"run's guarantee rules out no membership-inference attack (by {ACCOUNTANTS[bound.accountant].label})."
        )
    return (
        f"An attacker who wrongly accuses {accused} of non-members can catch at most {percent_up(caught)} of members "
        f"(any membership-inference attack, by {ACCOUNTANTS[bound.accountant].label}; Dong, Roth & Su 2019)."
    )


def attack_bound_of(stored: Any) -> AttackBound | None:
    """A result's stored curve (`TrainResult.attack_bound`), or None when it has none or a malformed one."""
    try:
        return None if stored is None else AttackBound.from_dict(stored)
    except TradeoffError:
        return None

"""Zero-concentrated DP (Bun & Steinke 2016) for Gaussian and pure-ε releases.

A Gaussian release with noise multiplier σ is 1/(2σ²)-zCDP (Prop. 1.6); an ε-DP release (Laplace,
exponential mechanism) is ε²/2-zCDP (Prop. 1.4); ρ adds up under composition (Lemma 1.7); ρ-zCDP
implies (ρ + 2√(ρ ln(1/δ)), δ)-DP (Prop. 1.3). zCDP does not capture privacy amplification by
subsampling, so sampled releases (DP-SGD lots) are not applicable here, except at sampling rate 1, where every
example is in every lot and a step is the Gaussian release itself.
"""

import numpy as np
from dp_accounting import dp_event

from engine.privacy.accountants.curve import EpsilonCurve
from engine.privacy.accountants.gaussian import gaussian_sigma
from engine.privacy.accountants.registry import Accountant, register_accountant
from engine.privacy.errors import NotApplicableError, check_delta
from engine.privacy.events import PureDpEvent
from engine.privacy.ledger import PrivacyLedger

NAME = "zcdp"
TITLE = "zCDP (Bun–Steinke)"


def release_rho(event: dp_event.DpEvent) -> float:
    """ρ of one occurrence of `event`."""
    if (sigma := gaussian_sigma(event)) is not None:
        return 1.0 / (2.0 * sigma**2)
    if isinstance(event, dp_event.GaussianDpEvent):
        return np.inf if event.noise_multiplier == 0 else 1.0 / (2.0 * event.noise_multiplier**2)
    if isinstance(event, dp_event.LaplaceDpEvent):
        return np.inf if event.noise_multiplier == 0 else (1.0 / event.noise_multiplier) ** 2 / 2.0
    if isinstance(event, PureDpEvent):
        return event.epsilon**2 / 2.0
    if isinstance(event, dp_event.ZCDpEvent) and event.xi == 0:
        return float(event.rho)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return event.count * release_rho(event.event)
    if isinstance(event, dp_event.ComposedDpEvent):
        return sum(release_rho(e) for e in event.events)
    if isinstance(event, dp_event.PoissonSampledDpEvent | dp_event.SampledWithoutReplacementDpEvent):
        raise NotApplicableError("zCDP does not capture amplification by subsampling (sampled lots)")
    raise NotApplicableError(f"no zCDP analysis for {type(event).__name__}")


def epsilon_from_rho(rho: np.ndarray, delta: float) -> np.ndarray:
    check_delta(delta)
    return rho + 2.0 * np.sqrt(rho * np.log(1.0 / delta))


def curve(ledger: PrivacyLedger, *, delta: float, steps: np.ndarray | None = None) -> EpsilonCurve:
    steps = ledger.queried_steps(steps)
    rhos = np.array([release_rho(r.event) for r in ledger.releases], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        rho = np.nan_to_num(ledger.counts_at(steps) * rhos, nan=0.0).sum(axis=1) if len(rhos) else np.zeros(len(steps))
    return EpsilonCurve(accountant=NAME, delta=delta, steps=steps, epsilons=epsilon_from_rho(rho, delta))


register_accountant(
    Accountant(
        name=NAME,
        label="zCDP",
        title=TITLE,
        citation="Bun & Steinke 2016, Props 1.3, 1.4, 1.6",
        curve=curve,
        live=True,
    )
)

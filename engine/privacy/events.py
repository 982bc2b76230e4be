"""DP events: immutable descriptions of what an algorithm released about its private data.

Each builder returns a `dp_accounting` `DpEvent` describing *one occurrence* of a mechanism, built
from the numbers the code actually runs with:

- DP-SGD step (Abadi et al. 2016): the clipped gradient sum of a lot plus
  N(0, σ²C²I) noise. Poisson lots (each example joins with probability q) give a
  `PoissonSampledDpEvent`; fixed-size lots drawn without replacement give a
  `SampledWithoutReplacementDpEvent` (its analysis is for replace-one adjacency). Shuffling the data
  and iterating over it has no tight analysis: it is refused, or, on explicit request, labelled as
  the Poisson approximation (as TF Privacy's privacy statement does).
- Noisy gradient descent (Near & Abuah): per step a Gaussian release of the clipped gradient sum
  (sensitivity C), plus one Laplace release of the example count (sensitivity 1).
- DP-PCA (Abadi et al. 2016): one Gaussian release of the covariance of normalized inputs.
- Laplace mechanism and the exponential mechanism (Dwork–Roth Thm 3.6 and 3.10): pure ε-DP.
"""

import math
from enum import StrEnum

import attr
from dp_accounting import dp_event

from engine.privacy.errors import NoTightAnalysisError, PrivacyError
from engine.privacy.limits import MIN_ACCOUNTED_SAMPLING_RATE, SAMPLING_RATE


@attr.define(frozen=True)
class PureDpEvent(dp_event.DpEvent):
    """Any ε-DP mechanism (δ = 0), e.g. the exponential mechanism. Accounted by its worst case."""

    epsilon: float


class Sampling(StrEnum):
    POISSON = "poisson"
    WITHOUT_REPLACEMENT = "without_replacement"
    SHUFFLE = "shuffle"


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise PrivacyError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


MIN_NOISE_MULTIPLIER = 1e-3  # below this a Gaussian release protects nothing, and σ² underflows the accountants


def gaussian_event(*, noise_multiplier: float) -> dp_event.DpEvent:
    """A Gaussian release with noise std = noise_multiplier × sensitivity."""
    sigma = _positive("noise_multiplier", noise_multiplier)
    if sigma < MIN_NOISE_MULTIPLIER:
        raise PrivacyError(f"noise_multiplier must be >= {MIN_NOISE_MULTIPLIER:g}, got {noise_multiplier!r}")
    return dp_event.GaussianDpEvent(noise_multiplier=sigma)


def dpsgd_step_event(
    *,
    sampling_rate: float | None = None,
    noise_multiplier: float,
    sampling: Sampling = Sampling.POISSON,
    dataset_size: int | None = None,
    lot_size: int | None = None,
    approximate_shuffle: bool = False,
) -> dp_event.DpEvent:
    """One DP-SGD step under the given lot-sampling scheme.

    A Poisson rate below `MIN_ACCOUNTED_SAMPLING_RATE` (1e-9) is accounted at that rate: a valid upper bound, since
    the privacy of Poisson subsampling only weakens as q grows (the hockey-stick divergence of the mixture
    (1 − q)Q + qP against Q is convex in q and 0 at q = 0, so non-decreasing; Rényi divergence is jointly
    quasi-convex, so the same holds for RDP; Balle, Barthe & Gaboardi 2018; van Erven & Harremoës 2014). Below
    it the libraries' series fail to converge, and no dataset here has more than 10⁹ examples."""
    gaussian = gaussian_event(noise_multiplier=noise_multiplier)
    if sampling is Sampling.POISSON:
        if (problem := SAMPLING_RATE.problem(sampling_rate)) is not None:
            raise PrivacyError(f"sampling_rate {problem}")
        accounted = max(float(sampling_rate), MIN_ACCOUNTED_SAMPLING_RATE)
        return dp_event.PoissonSampledDpEvent(sampling_probability=accounted, event=gaussian)
    if dataset_size is None or lot_size is None or not 1 <= lot_size <= dataset_size:
        raise PrivacyError(f"lot_size must be in [1, dataset_size], got {lot_size} of {dataset_size}")
    if sampling is Sampling.WITHOUT_REPLACEMENT:
        return dp_event.SampledWithoutReplacementDpEvent(
            source_dataset_size=dataset_size, sample_size=lot_size, event=gaussian
        )
    if not approximate_shuffle:
        raise NoTightAnalysisError(
            "shuffle-and-iterate lots have no tight privacy analysis; no ε is reported. Use Poisson "
            "sampling, or ask explicitly for the Poisson approximation (not a proven bound)"
        )
    return dp_event.PoissonSampledDpEvent(sampling_probability=lot_size / dataset_size, event=gaussian)


def laplace_event(*, scale: float, sensitivity: float = 1.0) -> dp_event.DpEvent:
    """Laplace noise of `scale` b on a query of L1 sensitivity Δ: (Δ/b)-DP (Dwork–Roth Thm 3.6)."""
    return dp_event.LaplaceDpEvent(noise_multiplier=_positive("scale", scale) / _positive("sensitivity", sensitivity))


def exponential_mechanism_event(*, epsilon: float) -> dp_event.DpEvent:
    """The exponential mechanism run at privacy parameter ε (Dwork–Roth Thm 3.10): ε-DP."""
    return PureDpEvent(epsilon=_positive("epsilon", epsilon))


def noisy_gd_events(*, noise_multiplier: float, count_scale: float) -> tuple[dp_event.DpEvent, dp_event.DpEvent]:
    """Seed 000: (per-step event, up-front event) = (Gaussian sum, Laplace count with sensitivity 1)."""
    return gaussian_event(noise_multiplier=noise_multiplier), laplace_event(scale=count_scale)


def dp_pca_event(*, noise_multiplier: float) -> dp_event.DpEvent:
    """Seed 003: one Gaussian release of the covariance of L2-normalized inputs (sensitivity 1)."""
    return gaussian_event(noise_multiplier=noise_multiplier)


def dpsgd_event(*, sampling_rate: float, noise_multiplier: float, steps: int) -> dp_event.DpEvent:
    """A whole Poisson DP-SGD run: `steps` compositions of the step event."""
    if steps < 0 or int(steps) != steps:
        raise PrivacyError(f"steps must be a non-negative integer, got {steps}")
    step = dpsgd_step_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier)
    return dp_event.SelfComposedDpEvent(event=step, count=int(steps))

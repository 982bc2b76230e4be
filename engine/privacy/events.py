"""DP events: immutable descriptions of what an algorithm released about its private data.

DP-SGD with Poisson-sampled lots (Abadi et al. 2016, seed 001 and 003): at every step each example
joins the lot independently with probability q, the sum of per-example gradients clipped to L2 norm
C is released with N(0, σ²C²I) noise. One step is a Poisson-subsampled Gaussian mechanism with
noise multiplier σ; a run of T steps is its T-fold self-composition.
"""

from dp_accounting import dp_event

from engine.privacy.errors import PrivacyError


def dpsgd_step_event(*, sampling_rate: float, noise_multiplier: float) -> dp_event.DpEvent:
    """One DP-SGD step: a Gaussian release of a clipped sum over a Poisson-sampled lot."""
    if not 0.0 < sampling_rate <= 1.0:
        raise PrivacyError(f"sampling_rate must be in (0, 1], got {sampling_rate}")
    if not noise_multiplier > 0.0:
        raise PrivacyError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    return dp_event.PoissonSampledDpEvent(
        sampling_probability=sampling_rate,
        event=dp_event.GaussianDpEvent(noise_multiplier=noise_multiplier),
    )


def dpsgd_event(*, sampling_rate: float, noise_multiplier: float, steps: int) -> dp_event.DpEvent:
    """A whole DP-SGD run: `steps` compositions of the step event."""
    if steps < 0 or int(steps) != steps:
        raise PrivacyError(f"steps must be a non-negative integer, got {steps}")
    step = dpsgd_step_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier)
    return dp_event.SelfComposedDpEvent(event=step, count=int(steps))

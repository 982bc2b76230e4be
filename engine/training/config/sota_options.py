"""The spec keys of state-of-the-art DP-SGD (De et al. 2022), checked here for `spec.parse_spec`:

- `augmentation_multiplicity` K (dpsgd): each example of a lot is K random crops/flips of its image, their
  gradients averaged before clipping (`engine.training.augmentation`): needs the image itself, so an image
  dataset with pixel features and no `pca_dims`;
- `ema_decay` β (dpsgd, aniso_dpsgd, noisy_gd, nonprivate): the evaluated and released model is the
  exponential moving average of the iterates (`engine.training.averaging`); 0 is off;
- `fill_budget` (dpsgd): σ = `noise_multiplier` is kept and the run trains the most steps whose ε stays within
  `target_epsilon` (`plan.plan_run`), `epochs` being their upper bound; so it needs both of them.

Each of them at its off value (`keys.OFF_DEFAULTS`) is left out of the canonical spec: an older spec's cache
key is unchanged. Each check returns a `(field, problem)` pair (or None) that `parse_spec` raises as its
`SpecError`.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.privacy.limits import brief
from engine.training.datasets import DatasetInfo

if TYPE_CHECKING:
    from engine.training.config.spec import RunSpec

Problem = tuple[str, str] | None


def privacy_keys_problem(raw: Mapping[str, Any], *, private: bool) -> Problem:
    """How a private run's noise is set: exactly one of target_epsilon and noise_multiplier, or, with
    `fill_budget: true`, both (σ kept, the steps filled up to the target) and no calibration_accountant."""
    fill_budget = raw.get("fill_budget", False)
    if not isinstance(fill_budget, bool):
        return ("fill_budget", f"must be true or false, got {brief(fill_budget)}")
    given = ("target_epsilon" in raw, "noise_multiplier" in raw)
    if not fill_budget:
        if private and given[0] == given[1]:
            return (
                "target_epsilon",
                "give exactly one of target_epsilon and noise_multiplier (both only with fill_budget: true)",
            )
        return None
    if given != (True, True):
        return (
            "target_epsilon" if not given[0] else "noise_multiplier",
            "missing: fill_budget needs both target_epsilon (the budget) and noise_multiplier (σ, kept fixed)",
        )
    if "calibration_accountant" in raw:
        return (
            "calibration_accountant",
            "does not apply with fill_budget: σ is given, and the steps are filled by the tighter of PLD and RDP",
        )
    return None


def augmentation_problem(spec: "RunSpec", info: DatasetInfo) -> Problem:
    """Augmentation multiplicity transforms images: K > 1 needs the dataset's pixels as the model's input."""
    if spec.augmentation_multiplicity <= 1:
        return None
    key = "augmentation_multiplicity"
    if info.image_shape is None:
        return (key, f"must be 1 for {brief(info.name)}: augmentation crops and flips images, and it has none")
    if spec.features != "pixels":
        return (key, f"must be 1 with features {spec.features!r}: augmentation transforms the pixels")
    if spec.pca_dims is not None:
        return (key, "must be 1 with pca_dims: augmentation transforms the image, not its projection")
    return None


__all__ = ["augmentation_problem", "privacy_keys_problem"]

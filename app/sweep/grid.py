"""The Sweep page's inputs as a grid spec: which parameters can be swept, their values typed as
comma-separated numbers (validated, each error naming its field), and the seeds. Pure functions."""

import math
from dataclasses import dataclass
from typing import Any

from engine.jobs.sweep import MAX_SEEDS, MAX_VALUES


@dataclass(frozen=True)
class Sweepable:
    label: str
    integer: bool
    default: str  # the values offered when the parameter is first picked
    help: str


SWEEPABLE: dict[str, Sweepable] = {
    "target_epsilon": Sweepable(
        "Target ε", False, "0.5, 1, 2, 4, 8", "Each point calibrates σ so that the run ends at this ε (it replaces σ)."
    ),
    "noise_multiplier": Sweepable(
        "Noise multiplier σ",
        False,
        "0.8, 1, 1.5, 2, 3",
        "Each point trains with this σ and reports the ε it spent (it replaces target ε).",
    ),
    "clip_norm": Sweepable(
        "Clipping norm C",
        False,
        "0.25, 1, 4",
        "Per-example gradient norm bound; ε does not depend on it, accuracy does.",
    ),
    "lot_size": Sweepable(
        "Lot size L",
        True,
        "32, 64, 128, 256",
        "Expected examples per step (whole numbers); larger lots spend more ε per step.",
    ),
    "lr": Sweepable("Learning rate", False, "0.5, 1, 2", "SGD step size; ε does not depend on it."),
    "epochs": Sweepable("Epochs", False, "5, 10, 20", "Passes over the data: more steps spend more ε."),
    "augmentation_multiplicity": Sweepable(
        "Augmentation multiplicity K",
        True,
        "1, 4, 16",
        "Random crops (and flips where the data allow) per example, gradients averaged before clipping (De et al. "
        "2022); ε does not depend on it, each step costs about K times as much. DP-SGD on image pixels only.",
    ),
    "ema_decay": Sweepable(
        "Parameter averaging β",
        False,
        "0, 0.99, 0.999",
        "Decay of the moving average of the iterates that is evaluated and released: post-processing, so ε does "
        "not depend on it.",
    ),
}
ALTERNATIVES = {frozenset({"target_epsilon", "noise_multiplier"})}  # never swept together: one sets the other


class GridInputError(ValueError):
    """A typed sweep input is not usable; the message starts with the field's name."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def label(parameter: str) -> str:
    """A spec key's display name (sweeps made elsewhere may sweep keys this page does not offer)."""
    return SWEEPABLE[parameter].label if parameter in SWEEPABLE else parameter


def parse_values(field: str, text: str, *, integer: bool = False) -> list[float | int]:
    """Comma-separated numbers, distinct, in the order typed."""
    if not text.strip():
        raise GridInputError(field, "enter at least one value, e.g. 0.5, 1, 2")
    values: list[float | int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise GridInputError(field, "an empty value between commas")
        try:
            number = float(part)
        except ValueError:
            raise GridInputError(field, f"{part!r} is not a number") from None
        if not math.isfinite(number):
            raise GridInputError(field, f"{part!r} is not a finite number")
        if integer and not number.is_integer():
            raise GridInputError(field, f"{part!r} is not a whole number")
        value = int(number) if integer else number
        if value in values:
            raise GridInputError(field, f"{part!r} is given twice")
        values.append(value)
    if len(values) > MAX_VALUES:
        raise GridInputError(field, f"{len(values)} values; at most {MAX_VALUES}")
    return values


def check_parameters(first: str, second: str | None) -> None:
    if second is None:
        return
    if second == first:
        raise GridInputError("Second parameter", f"{label(first)} is already the first parameter; pick another")
    if frozenset({first, second}) in ALTERNATIVES:
        raise GridInputError("Second parameter", "target ε and σ are alternatives (one sets the other); sweep one")


def seeds_from(first_seed: int, count: int) -> list[int]:
    if not 1 <= count <= MAX_SEEDS:
        raise GridInputError("Seeds per point", f"must be between 1 and {MAX_SEEDS}, got {count}")
    return list(range(first_seed, first_seed + count))


def grid_spec(
    base: dict[str, Any], grid: dict[str, list], seeds: list[int], name: str = "", *, search: dict | None = None
) -> dict[str, Any]:
    """The grid spec `engine.jobs.sweep.submit_sweep` takes: every point × `seeds`, or a private `search`."""
    spec: dict[str, Any] = {"base": base, "grid": grid} | ({"search": search} if search else {"seeds": seeds})
    if name.strip():
        spec["name"] = name.strip()
    return spec

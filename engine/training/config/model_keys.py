"""The model keys of a run spec, checked against the dataset's public facts: which inputs feed which model
(`features`: pixels or ScatterNet coefficients), whether the dataset's images fit the model, and the options that
apply to one model only (`hidden` for "mlp"; `wrn_depth` and `wrn_width` for "wrn", the wide ResNet of De et al.
2022). `model_problem` returns a `(field, problem)` pair (or None) that `spec.parse_spec` raises as its
`SpecError`; `model_options` then gives the options with their defaults filled in.
"""

from collections.abc import Mapping
from typing import Any

from engine.privacy.limits import brief
from engine.training.config.keys import DEFAULT_HIDDEN, HIDDEN_WIDTH, MAX_HIDDEN_LAYERS, RANGES
from engine.training.datasets import DatasetInfo
from engine.training.features import scatternet
from engine.training.models import wide_resnet
from engine.training.models.architectures import cnn_supports
from engine.training.models.registry import model_entry

Problem = tuple[str, str] | None
WRN_KEYS = ("wrn_depth", "wrn_width")


def model_problem(raw: Mapping[str, Any], model: str, features: str, info: DatasetInfo) -> Problem:
    """What is wrong with the spec's model keys for this dataset, if anything (the numbers' ranges, those of
    `keys.RANGES`, are checked before)."""
    shape = "no image shape" if info.image_shape is None else f"images of {'×'.join(map(str, info.image_shape))}"
    if features == "scatternet":
        if not scatternet.supports(info.image_shape):
            return "features", f"'scatternet' needs images of at least 16×16; {info.name} has none"
        if model == "wrn":
            return "features", "'scatternet' feeds logreg, mlp or cnn; the wrn takes pixels"
    if model == "cnn" and features == "pixels" and not cnn_supports(info.image_shape):
        return "model", f"'cnn' needs images of at least 1×28×28; {info.name} has {shape}"
    if model == "wrn" and not wide_resnet.supports(info.image_shape):
        side = wide_resnet.MIN_SIDE
        return "model", f"'wrn' needs images of at least {side}×{side}; {info.name} has {shape}"
    entry = model_entry(model)
    if (entry.needs_images and info.image_shape is None) or not entry.supports(info.image_shape, features):
        return "model", f"{model!r} does not take {info.name}'s inputs ({shape}, {features})"
    if model != "mlp" and "hidden" in raw:
        return "hidden", "only applies to model 'mlp'"
    if model != "wrn" and (key := next((k for k in WRN_KEYS if k in raw), None)) is not None:
        return key, "only applies to model 'wrn'"
    if model == "wrn" and "wrn_depth" in raw and (problem := wide_resnet.depth_problem(raw["wrn_depth"])) is not None:
        return "wrn_depth", problem
    if model == "mlp":
        hidden = raw.get("hidden", list(DEFAULT_HIDDEN))
        if not isinstance(hidden, list | tuple) or not 1 <= len(hidden) <= MAX_HIDDEN_LAYERS:
            return "hidden", f"must be a list of 1 to {MAX_HIDDEN_LAYERS} layer widths, got {brief(hidden)}"
        return next((("hidden", p) for w in hidden if (p := HIDDEN_WIDTH.problem(w)) is not None), None)
    return None


def model_options(raw: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The options of the spec's model, defaults filled in (after `model_problem` returned None)."""
    if model == "mlp":
        return {"hidden": tuple(HIDDEN_WIDTH.convert(w) for w in raw.get("hidden", list(DEFAULT_HIDDEN)))}
    if model == "wrn":
        depth = raw.get("wrn_depth", wide_resnet.DEFAULT_DEPTH)
        width = raw.get("wrn_width", wide_resnet.DEFAULT_WIDTH)
        return {"wrn_depth": RANGES["wrn_depth"].convert(depth), "wrn_width": RANGES["wrn_width"].convert(width)}
    return {}

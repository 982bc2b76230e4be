"""The run spec: what a user asks the engine to train, validated field by field.

A spec is a JSON object. Unknown keys, missing keys, wrong types and out-of-range values raise
`SpecError`, whose message names the key and the allowed range. Checks that need the dataset
(lot size ≤ N, δ < 1/N) use public dataset sizes, never the data itself.
"""

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from engine.training.datasets import DATASETS, dataset_info

ALGORITHMS = ("dpsgd",)
MODELS = ("logreg", "mlp")


class SpecError(ValueError):
    """A spec field is missing, unknown, of the wrong type or out of range."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class NumberRange:
    low: float
    high: float
    low_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        kind = "an integer" if self.integer else "a number"
        return f"{kind} in {left}{self.low:g}, {self.high:g}]"

    def check(self, field: str, value: Any) -> float | int:
        ok_type = isinstance(value, int) if self.integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or (isinstance(value, float) and not math.isfinite(value)):
            raise SpecError(field, f"must be {self.describe()}, got {value!r}")
        below = value <= self.low if self.low_open else value < self.low
        if below or value > self.high:
            raise SpecError(field, f"must be {self.describe()}, got {value!r}")
        return int(value) if self.integer else float(value)


RANGES: dict[str, NumberRange] = {
    "target_epsilon": NumberRange(0.01, 100.0),
    "noise_multiplier": NumberRange(0.05, 500.0),
    "delta": NumberRange(0.0, 0.1, low_open=True),
    "clip_norm": NumberRange(0.0, 1000.0, low_open=True),
    "lot_size": NumberRange(1, 1_000_000, integer=True),
    "epochs": NumberRange(0.0, 1000.0, low_open=True),
    "lr": NumberRange(0.0, 1000.0, low_open=True),
    "seed": NumberRange(0, 2**31 - 1, integer=True),
}
HIDDEN_WIDTH = NumberRange(1, 8192, integer=True)
MAX_HIDDEN_LAYERS = 4
DEFAULT_HIDDEN_SIZES = (128,)
REQUIRED = ("dataset", "model", "algorithm", "delta", "clip_norm", "lot_size", "epochs", "lr", "seed")
OPTIONAL = ("target_epsilon", "noise_multiplier", "hidden_sizes")


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    dataset: str
    model: str
    algorithm: str
    delta: float
    clip_norm: float
    lot_size: int
    epochs: float
    lr: float
    seed: int
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    hidden_sizes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form: absent options are left out."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if self.model == "mlp":
            out["hidden_sizes"] = list(self.hidden_sizes)
        else:
            out.pop("hidden_sizes")
        return out

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def cache_key(self, engine_version: str) -> str:
        """Identity of a run: the canonical spec plus the engine version that trains it."""
        payload = json.dumps({"engine": engine_version, "spec": self.to_dict()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()


def parse_spec(raw: Mapping[str, Any]) -> RunSpec:
    """Validate a JSON object into a RunSpec, including the dataset-dependent checks."""
    if not isinstance(raw, Mapping):
        raise SpecError("spec", f"must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise SpecError(unknown[0], f"unknown key; allowed keys: {', '.join(REQUIRED + OPTIONAL)}")
    for key in REQUIRED:
        if key not in raw:
            raise SpecError(key, "missing required key")
    has_target, has_sigma = "target_epsilon" in raw, "noise_multiplier" in raw
    if has_target == has_sigma:
        raise SpecError("target_epsilon", "give exactly one of target_epsilon and noise_multiplier")

    values: dict[str, Any] = {k: rng.check(k, raw[k]) for k, rng in RANGES.items() if k in raw}

    info = dataset_info(_choice("dataset", raw["dataset"], tuple(DATASETS)))
    model = _choice("model", raw["model"], MODELS)
    algorithm = _choice("algorithm", raw["algorithm"], ALGORITHMS)
    if values["lot_size"] > info.n_train:
        raise SpecError("lot_size", f"must be an integer in [1, {info.n_train}] (the training set size of {info.name})")
    if values["delta"] >= 1.0 / info.n_train:
        raise SpecError(
            "delta",
            f"must be < 1/N = {1.0 / info.n_train:.3g} for {info.name} (N={info.n_train}); "
            f"δ ≥ 1/N allows releasing a whole record, got {values['delta']:g}",
        )

    hidden: tuple[int, ...] = ()
    if model == "mlp":
        hidden_raw = raw.get("hidden_sizes", list(DEFAULT_HIDDEN_SIZES))
        if not isinstance(hidden_raw, list | tuple) or not 1 <= len(hidden_raw) <= MAX_HIDDEN_LAYERS:
            raise SpecError(
                "hidden_sizes", f"must be a list of 1 to {MAX_HIDDEN_LAYERS} layer widths, got {hidden_raw!r}"
            )
        hidden = tuple(HIDDEN_WIDTH.check("hidden_sizes", w) for w in hidden_raw)
    elif "hidden_sizes" in raw:
        raise SpecError("hidden_sizes", "only applies to model 'mlp'")

    return RunSpec(dataset=info.name, model=model, algorithm=algorithm, hidden_sizes=hidden, **values)


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise SpecError(field, f"must be a string, got {value!r}")
    if value not in allowed:
        raise SpecError(field, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value

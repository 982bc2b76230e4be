"""The run spec: what a user asks the engine to train, validated field by field.

A spec is a JSON object. Unknown keys, keys that do not apply to the chosen algorithm or model, missing keys, wrong
types and out-of-range values raise `SpecError`, whose message names the key and the allowed range. Checks that need
the dataset (lot size ≤ N, δ < 1/N, two classes for noisy GD, an image for the CNN) use public dataset facts only.

Which keys apply to which algorithm, their ranges and defaults are the tables of `keys`.

The canonical form (`to_dict`) fills every default (leaving out switches at their off value, `keys.OFF_DEFAULTS`),
so two specs that train the same thing have the same cache key. For a `csv:PATH` dataset it also records the file's
SHA-256 (`data_sha256`): the run's identity includes the data it was trained on, and a file changed after
submission is refused rather than silently trained on.
"""

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from engine.privacy.limits import NumberRange, brief
from engine.privacy.planning import MAX_TRAINING_STEPS, steps_for
from engine.training.config.audit import AuditError, parse_audit
from engine.training.config.keys import (
    ALGORITHMS,
    ALL_KEYS,
    ANISO_GRANULARITIES,
    CALIBRATION_ACCOUNTANTS,
    CLIPPING_MODES,
    DEFAULT_COUNT_EPSILON,
    DEFAULT_THRESHOLDS,
    FEATURES,
    KEYS_BY_ALGORITHM,
    LEARNER_MODELS,
    NOISE_MODES,
    OFF_DEFAULTS,
    RANGES,
    REQUIRED_BY_ALGORITHM,
    SCHEDULES,
    Algorithm,
)
from engine.training.config.model_keys import model_options, model_problem
from engine.training.config.optimizer_keys import DEFAULT_MOMENTUM, OptimizerName
from engine.training.config.reach import canaries_problem, schedules_problem
from engine.training.config.schedules import CONSTANT, Schedule, ScheduleError, ScheduleKind, parse_schedule
from engine.training.config.sota_options import augmentation_problem, privacy_keys_problem
from engine.training.config.text import bad_text
from engine.training.datasets import (
    CSV_PREFIX,
    CsvSchemaError,
    DatasetError,
    DatasetInfo,
    dataset_info,
    file_sha256,
    parse_csv_schema,
)
from engine.training.models.registry import MODELS, model_entry


class SpecError(ValueError):
    """A spec field is missing, unknown, of the wrong type or out of range. The field's name is cut to
    `MAX_FIELD_CHARACTERS` in the message (a key can be anything a file holds)."""

    def __init__(self, field: str, message: str):
        shown = field if len(field) <= MAX_FIELD_CHARACTERS else brief(field, MAX_FIELD_CHARACTERS)
        super().__init__(f"{shown}: {message}")
        self.field = field


MAX_FIELD_CHARACTERS = 200


def checked_number(field: str, value: Any, allowed: NumberRange) -> float | int:
    """`value` converted to the range's type, or `SpecError` naming the field and the allowed range."""
    if (problem := allowed.problem(value)) is not None:
        raise SpecError(field, problem)
    return allowed.convert(value)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    dataset: str
    model: str
    algorithm: str
    epochs: float
    lr: float
    seed: int
    lot_size: int | None = None  # expected lot size L (dpsgd) or batch size (nonprivate); noisy GD: full batch
    delta: float | None = None
    clip_norm: float | None = None
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    calibration_accountant: str | None = None  # with target_epsilon: the accountant σ is calibrated by
    noise: str | None = None  # private Gaussian-noise algorithms: "reproducible" (lab) or "release" (OS randomness)
    clipping: str | None = None
    hidden: tuple[int, ...] = ()
    wrn_depth: int | None = None  # wrn: depth 6n + 4 (De et al. 2022's WRN-16-4 by default)
    wrn_width: int | None = None  # wrn: width multiplier k
    optimizer: str = OptimizerName.SGD.value
    momentum: float | None = None
    lr_schedule: Schedule = CONSTANT
    noise_schedule: Schedule | None = None
    clip_schedule: Schedule | None = None
    physical_batch_size: int | None = None
    features: str = "pixels"  # or "scatternet": fixed ScatterNet features (Tramèr & Boneh 2021)
    pca_dims: int | None = None
    pca_noise: float | None = None
    count_epsilon: float | None = None
    aniso_granularity: str | None = None  # aniso_dpsgd: one weight per layer or per coordinate
    aniso_smoothing: float | None = None  # aniso_dpsgd: β of the running average of released noisy gradients
    aniso_max_ratio: float | None = None  # aniso_dpsgd: weights are kept within [1/r, r]
    thresholds: int | None = None  # stumps and experts: thresholds per feature on the public grid
    rounds: int | None = None  # online learners: rounds T, one training example each
    schema: dict | None = None  # csv:PATH datasets: the declared schema
    data_sha256: str | None = None  # csv:PATH datasets: the file the run is bound to
    audit: dict | None = None  # dpsgd: canaries for a one-run audit of ε (`config.audit`)
    augmentation_multiplicity: int = 1  # dpsgd: K augmented copies per example (De et al. 2022); 1: off
    ema_decay: float = 0.0  # β of the moving average of the iterates that is evaluated and released; 0: off
    fill_budget: bool = False  # dpsgd: σ given, steps filled up to target_epsilon (epochs: their upper bound)

    @property
    def private(self) -> bool:
        return Algorithm(self.algorithm).private

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form: every default filled in; options that do not apply and switches off left out."""
        out: dict[str, Any] = {}
        applies = KEYS_BY_ALGORITHM[Algorithm(self.algorithm)]
        for key, value in asdict(self).items():
            off = key in OFF_DEFAULTS and value == OFF_DEFAULTS[key]  # an older spec, without the key, keeps its form
            if value is None or off or key not in applies or (key == "hidden" and self.model != "mlp"):
                continue
            out[key] = list(value) if key == "hidden" else value
        for key in SCHEDULES:
            schedule = getattr(self, key)
            if schedule is not None and key in applies:
                out[key] = schedule.to_dict()
        return out

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def cache_key(self, engine_version: str) -> str:
        """Identity of a run: the canonical spec plus the engine version that trains it."""
        payload = json.dumps({"engine": engine_version, "spec": self.to_dict()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()


def spec_dataset_info(spec: RunSpec) -> DatasetInfo:
    """Public facts of the spec's dataset (for a CSV upload: its declared schema and row counts)."""
    return dataset_info(spec.dataset, schema=_csv_schema(spec.schema) if spec.schema is not None else None)


def parse_spec(raw: Mapping[str, Any]) -> RunSpec:
    """Validate a JSON object into a RunSpec, including the dataset-dependent checks."""
    if not isinstance(raw, Mapping):
        raise SpecError("spec", f"must be a JSON object, got {type(raw).__name__}")
    if (bad := bad_text(raw, "")) is not None:
        raise SpecError(*bad)
    unknown = sorted(set(raw) - set(ALL_KEYS))
    if unknown:
        raise SpecError(unknown[0], f"unknown key; allowed keys: {', '.join(ALL_KEYS)}")
    algorithm = Algorithm(_choice("algorithm", raw.get("algorithm"), ALGORITHMS))
    raw = _lab_noise_only(raw, algorithm)
    not_here = sorted(set(raw) - set(KEYS_BY_ALGORITHM[algorithm]))
    if not_here:
        raise SpecError(not_here[0], f"does not apply to algorithm {algorithm.value!r}")
    for key in REQUIRED_BY_ALGORITHM[algorithm]:
        if key not in raw:
            raise SpecError(key, "missing required key")
    if (problem := privacy_keys_problem(raw, private=algorithm.private)) is not None:
        raise SpecError(*problem)

    values: dict[str, Any] = {k: checked_number(k, raw[k], rng) for k, rng in RANGES.items() if k in raw}
    info, csv_fields = _dataset(raw)
    if algorithm.learner:
        return _learner_spec(raw, algorithm, values, info, csv_fields)
    model = _choice("model", raw["model"], tuple(MODELS))
    values |= _model_options(raw, model, info)
    values |= _privacy_options(raw, algorithm, values, info)
    values |= _training_options(raw, algorithm, values, info, model)
    values["fill_budget"] = raw.get("fill_budget", False)  # a bool: `privacy_keys_problem` checked it
    spec = RunSpec(dataset=info.name, model=model, algorithm=algorithm.value, **csv_fields, **values)
    for problem in (augmentation_problem(spec, info), schedules_problem(spec, info), canaries_problem(spec, info)):
        if problem is not None:
            raise SpecError(*problem)
    return spec


def _lab_noise_only(raw: Mapping[str, Any], algorithm: Algorithm) -> Mapping[str, Any]:
    """`noise` where no Gaussian noise is drawn (learners, the baseline): the lab mode, which is what they do,
    is dropped; release mode is refused, naming the algorithms that have it."""
    if "noise" not in raw or "noise" in KEYS_BY_ALGORITHM[algorithm]:
        return raw
    if _choice("noise", raw["noise"], NOISE_MODES) != NOISE_MODES[0]:
        having = ", ".join(a.value for a, keys in KEYS_BY_ALGORITHM.items() if "noise" in keys)
        raise SpecError(
            "noise",
            f"release mode applies to {having} (their Gaussian noise from OS randomness, "
            f"hardened); {algorithm.value} runs in the reproducible lab mode only",
        )
    return {k: v for k, v in raw.items() if k != "noise"}


def _learner_spec(
    raw: Mapping[str, Any], algorithm: Algorithm, values: dict[str, Any], info: DatasetInfo, csv_fields: dict
) -> RunSpec:
    """A textbook learner (Dwork & Roth 2014, ch. 11): binary labels, a target ε (its mechanism's budget), δ < 1/N."""
    model = LEARNER_MODELS[algorithm]
    _choice("model", raw.get("model", model), (model,))
    if info.n_classes != 2:
        raise SpecError("dataset", f"{algorithm.value} learns two classes; {info.name} has {info.n_classes} classes")
    _check_delta(values["delta"], info)
    out: dict[str, Any] = {"epochs": 1.0, "lr": 1.0} | values
    if algorithm in (Algorithm.EXPMECH_STUMPS, Algorithm.RWM_ONLINE, Algorithm.RWM_LINEAR):
        out.setdefault("thresholds", DEFAULT_THRESHOLDS)
    if algorithm in (Algorithm.RWM_ONLINE, Algorithm.RWM_LINEAR):
        out.setdefault("rounds", info.n_train)
        if out["rounds"] > info.n_train:
            raise SpecError(
                "rounds",
                f"must be an integer in [1, {info.n_train}]: each round is a different "
                f"training example of {info.name}, so each example is used once",
            )
    if algorithm is Algorithm.SQ_LAPLACE and out["epochs"] != int(out["epochs"]):
        raise SpecError(
            "epochs", f"sq_laplace takes whole iterations (full-batch statistical queries), got {out['epochs']:g}"
        )
    return RunSpec(dataset=info.name, model=model, algorithm=algorithm.value, **csv_fields, **out)


def _check_delta(delta: float, info: DatasetInfo) -> None:
    if delta >= 1.0 / info.n_train:
        raise SpecError(
            "delta",
            f"must be < 1/N = {1.0 / info.n_train:.3g} for {info.name} (N={info.n_train}); "
            f"δ ≥ 1/N allows releasing a whole record, got {delta:g}",
        )


def _dataset(raw: Mapping[str, Any]) -> tuple[DatasetInfo, dict[str, Any]]:
    name = raw.get("dataset")
    if not isinstance(name, str):
        raise SpecError("dataset", f"must be a string, got {brief(name)}")
    if not name.startswith(CSV_PREFIX):
        for key in ("schema", "data_sha256"):
            if key in raw:
                raise SpecError(key, "only applies to csv:PATH datasets")
        try:
            return dataset_info(name), {}
        except DatasetError as exc:
            raise SpecError("dataset", str(exc)) from None
    if "schema" not in raw:
        raise SpecError("schema", "missing: a csv:PATH dataset needs its declared schema (target, classes, columns)")
    schema = _csv_schema(raw["schema"])
    path = _regular_csv(name[len(CSV_PREFIX) :])
    try:
        info = dataset_info(CSV_PREFIX + path, schema=schema)
        digest = file_sha256(path)
    except (DatasetError, OSError) as exc:
        raise SpecError("dataset", str(exc)) from None
    if "data_sha256" in raw and raw["data_sha256"] != digest:
        raise SpecError("data_sha256", f"{path} changed since this spec was made (sha256 now {digest})")
    return info, {"schema": dict(raw["schema"]), "data_sha256": digest}


def _regular_csv(path: str) -> str:
    """The absolute path of a CSV upload, if it names a regular file: the spec stores it, so a worker started
    in another directory reads the same file (its `data_sha256` pins the content)."""
    if not path:
        raise SpecError("dataset", f"give the CSV file's path after {CSV_PREFIX!r}")
    absolute = os.path.abspath(path)
    try:
        found = os.stat(absolute)  # never opens it: a FIFO would block
    except OSError as exc:
        raise SpecError("dataset", f"{brief(absolute)}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(found.st_mode):
        raise SpecError("dataset", f"{brief(absolute)}: not a regular file; give the path of a CSV file")
    return absolute


def _csv_schema(raw: Any):
    try:
        return parse_csv_schema(raw)
    except CsvSchemaError as exc:
        raise SpecError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


def _model_options(raw: Mapping[str, Any], model: str, info: DatasetInfo) -> dict[str, Any]:
    features = _choice("features", raw.get("features", "pixels"), FEATURES)
    if (problem := model_problem(raw, model, features, info)) is not None:
        raise SpecError(*problem)
    return {"features": features} | model_options(raw, model)


def _privacy_options(
    raw: Mapping[str, Any], algorithm: Algorithm, values: dict[str, Any], info: DatasetInfo
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not algorithm.private:
        return out
    _check_delta(values["delta"], info)
    out["noise"] = _choice("noise", raw.get("noise", NOISE_MODES[0]), NOISE_MODES)
    if "target_epsilon" in values and "noise_multiplier" not in values:  # σ to calibrate (not a filled budget)
        out["calibration_accountant"] = _choice(
            "calibration_accountant", raw.get("calibration_accountant", "rdp"), CALIBRATION_ACCOUNTANTS
        )
    elif "calibration_accountant" in raw:
        raise SpecError("calibration_accountant", "only applies with target_epsilon (σ is calibrated to meet it)")
    if algorithm is Algorithm.ANISO_DPSGD:
        out["aniso_granularity"] = _choice(
            "aniso_granularity", raw.get("aniso_granularity", "layer"), ANISO_GRANULARITIES
        )
        out["aniso_smoothing"] = values.get("aniso_smoothing", 0.9)
        out["aniso_max_ratio"] = values.get("aniso_max_ratio", 10.0)
    else:
        modes = CLIPPING_MODES[algorithm]
        out["clipping"] = _choice("clipping", raw.get("clipping", modes[0]), modes)
    if algorithm is Algorithm.NOISY_GD:
        out["count_epsilon"] = values.get("count_epsilon", DEFAULT_COUNT_EPSILON)
        if raw["model"] != "logreg":
            raise SpecError("model", "noisy_gd trains logistic regression with labels ±1 (Near & Abuah): use 'logreg'")
        if info.n_classes != 2:
            raise SpecError("dataset", f"noisy_gd needs a two-class dataset; {info.name} has {info.n_classes} classes")
    noise_kinds = (ScheduleKind.CONSTANT, ScheduleKind.STEP)  # a σ schedule must be piecewise constant
    out["noise_schedule"] = _schedule("noise_schedule", raw, allowed=noise_kinds)
    out["clip_schedule"] = _schedule("clip_schedule", raw)
    if "pca_dims" in raw and "pca_noise" not in raw:
        raise SpecError("pca_noise", "missing: private DP-PCA needs its noise σ_p (Abadi et al.: 4, 7 or 16)")
    if "pca_noise" in raw and "pca_dims" not in raw:
        raise SpecError("pca_noise", "only applies with pca_dims")
    return out


def _training_options(
    raw: Mapping[str, Any], algorithm: Algorithm, values: dict[str, Any], info: DatasetInfo, model: str
) -> dict[str, Any]:
    out: dict[str, Any] = {"lr_schedule": _schedule("lr_schedule", raw)}
    if "audit" in raw:
        try:
            out["audit"] = parse_audit(raw["audit"])
        except AuditError as exc:
            raise SpecError("audit", str(exc)) from None
    optimizer = _choice("optimizer", raw.get("optimizer", OptimizerName.SGD.value), tuple(OptimizerName))
    out["optimizer"] = optimizer
    if optimizer == OptimizerName.MOMENTUM:
        out["momentum"] = values.get("momentum", DEFAULT_MOMENTUM)
    elif "momentum" in raw:
        raise SpecError("momentum", "only applies to optimizer 'momentum'")
    if "lot_size" in values and values["lot_size"] > info.n_train:
        raise SpecError("lot_size", f"must be an integer in [1, {info.n_train}] (the training set size of {info.name})")
    lot = values.get("lot_size", info.n_train)  # noisy GD: the full batch
    steps = steps_for(epochs=values["epochs"], n_train=info.n_train, lot_size=lot)
    if steps > MAX_TRAINING_STEPS:
        raise SpecError(
            "epochs",
            f"{values['epochs']:g} epochs at lot size {lot} is {steps:,} steps; at most "
            f"{MAX_TRAINING_STEPS:,} per run (raise lot_size or lower epochs)",
        )
    if "pca_dims" in values:
        if model_entry(model).needs_images:
            raise SpecError(
                "pca_dims", f"does not apply to model {model!r} (it needs the image, not projected features)"
            )
        if raw.get("features") != "scatternet" and info.n_features is not None and values["pca_dims"] > info.n_features:
            raise SpecError("pca_dims", f"must be an integer in [1, {info.n_features}] (the features of {info.name})")
    return out


def _schedule(field: str, raw: Mapping[str, Any], *, allowed: tuple[ScheduleKind, ...] = tuple(ScheduleKind)):
    if field not in raw:
        return CONSTANT
    try:
        return parse_schedule(field, raw[field], allowed=allowed)
    except ScheduleError as exc:
        raise SpecError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value is None:
        raise SpecError(field, "missing required key")
    if not isinstance(value, str):
        raise SpecError(field, f"must be a string, got {brief(value)}")
    if value not in allowed:
        raise SpecError(field, f"must be one of {', '.join(allowed)}; got {brief(value)}")
    return value

"""The shape of a stored run as every page and command reads it: which spec, plan and result fields
exist and of which type. A run this engine trained has it by construction; an imported run is checked
against it (`check_shown_fields`), whatever engine version made it, so no record in a store can break a
page, a table or `python -m engine runs`.

- spec: `dataset`, `model` and `algorithm` are strings; every other key this engine knows has its
  type (numbers finite, integers whole, `hidden` a list of integers, schedules and `schema` objects);
  keys this engine does not know (a newer engine's) are kept and shown as they are;
- plan: numbers, but `algorithm` (a string), `calibrated_by` and `steps_filled_by` (an accountant's name),
  `noise_phases` (a list of [σ factor, steps]) and, for a run that restarted, `earlier_attempts` (the steps each
  earlier attempt released) and `earlier_noise`;
- result (finished runs; cancelled and failed runs have one or none): every field of `TrainResult`
  but the private `seconds` (a default export leaves it out: `engine.jobs.disclosure`), each with its
  declared type (`epsilon` and the `epsilons` may be +∞: no finite bound), `test_accuracy` in [0, 1];
  `stack`, when present, holds the numbers the run panel shows: the joint ε as `joint_epsilon` (+∞
  allowed: no bound) with its `joint_accountant`, or, in a record of an engine before 0.4.0, `joint_epsilon_rdp`.
"""

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from cache import RunStatus
from engine.jobs.disclosure import is_private_field
from engine.privacy.auditing import AUDIT_FIELDS
from engine.privacy.limits import brief
from engine.training import TrainResult
from engine.training.config.keys import CALIBRATION_ACCOUNTANTS, RANGES, SCHEDULES

Check = Callable[[Any], bool]
SPEC_STRINGS = (
    "dataset",
    "model",
    "algorithm",
    "optimizer",
    "clipping",
    "features",
    "aniso_granularity",
    "data_sha256",
    "noise",
)
REQUIRED_SPEC_STRINGS = ("dataset", "model", "algorithm")
STACK_NUMBERS = ("members", "lead_seed", "joint_delta")
JOINT_EPSILONS = ("joint_epsilon", "joint_epsilon_rdp")  # this engine's (+∞ allowed), or an engine < 0.4.0's
EARLIER_NOISE = ("fresh", "replayed")  # how a restarted run's earlier attempts drew their noise


class RunShapeError(ValueError):
    """A stored record lacks a field the pages read, or holds one of the wrong type; `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def _finite(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _annotation_check(annotation: Any) -> Check:
    """A check for a value of `TrainResult`'s field type (str, bool, int, float, dicts, unions with None)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        checks = [_annotation_check(a) for a in args]
        return lambda value: any(check(value) for check in checks)
    if annotation is type(None):
        return lambda value: value is None
    if annotation is bool:
        return lambda value: isinstance(value, bool)
    if annotation is int:
        return lambda value: _whole(value) and value >= 0
    if annotation is float:
        return lambda value: _number(value) and value >= 0
    if annotation is str:
        return lambda value: isinstance(value, str)
    if annotation is dict or origin is dict:
        item = _annotation_check(args[1]) if args else (lambda value: True)
        return lambda value: isinstance(value, dict) and all(isinstance(k, str) and item(v) for k, v in value.items())
    raise TypeError(f"no check for the annotation {annotation!r}")


RESULT_HINTS = typing.get_type_hints(TrainResult)
RESULT_FIELDS = dataclasses.fields(TrainResult)
RESULT_CHECKS: dict[str, Check] = {f.name: _annotation_check(RESULT_HINTS[f.name]) for f in RESULT_FIELDS}
# Every field without a default, but those a default export leaves out (`seconds`: private, it follows the lot sizes)
RESULT_REQUIRED = tuple(
    f.name for f in RESULT_FIELDS if f.default is dataclasses.MISSING and not is_private_field(f.name)
)


def _describe(annotation: Any) -> str:
    return str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")


def check_spec(spec: Mapping[str, Any]) -> None:
    for key in REQUIRED_SPEC_STRINGS:
        if not isinstance(spec.get(key), str):
            raise RunShapeError(f"spec.{key}", f"must be a string; got {brief(spec.get(key))}")
    for key, value in spec.items():
        if key in SPEC_STRINGS and not isinstance(value, str):
            raise RunShapeError(f"spec.{key}", f"must be a string; got {brief(value)}")
        if key in RANGES and not (_whole(value) if RANGES[key].integer else _finite(value)):
            kind = "an integer" if RANGES[key].integer else "a finite number"
            raise RunShapeError(f"spec.{key}", f"must be {kind}; got {brief(value)}")
        if key == "hidden" and not (isinstance(value, list) and all(_whole(w) for w in value)):
            raise RunShapeError("spec.hidden", f"must be a list of integers; got {brief(value)}")
        if key in (*SCHEDULES, "schema", "audit") and not isinstance(value, dict):
            raise RunShapeError(f"spec.{key}", f"must be an object; got {brief(value)}")


def check_plan(plan: Mapping[str, Any]) -> None:
    for key, value in plan.items():
        expected = "a number"
        if key == "algorithm":
            ok, expected = isinstance(value, str), "a string"
        elif key in ("calibrated_by", "steps_filled_by"):
            ok, expected = value in CALIBRATION_ACCOUNTANTS, f"one of {', '.join(CALIBRATION_ACCOUNTANTS)}"
        elif key == "noise_phases":
            ok = isinstance(value, list) and all(isinstance(p, list) and all(_finite(x) for x in p) for p in value)
        elif key == "earlier_attempts":
            ok, expected = isinstance(value, list) and all(_whole(s) and s >= 0 for s in value), "a list of steps"
        elif key == "earlier_noise":
            ok, expected = value in EARLIER_NOISE, f"one of {', '.join(EARLIER_NOISE)}"
        else:
            ok = _finite(value)
        if not ok:
            raise RunShapeError(f"plan.{key}", f"must be {expected}; got {brief(value)}")


def check_result(result: Mapping[str, Any]) -> None:
    for key in RESULT_REQUIRED:
        if key not in result:
            raise RunShapeError(f"result.{key}", "missing; a run's result has every field the pages show")
    for key, check in RESULT_CHECKS.items():
        if key in result and not check(result[key]):
            expected = _describe(RESULT_HINTS[key])
            raise RunShapeError(f"result.{key}", f"must be of type {expected}; got {brief(result[key])}")
    if not 0 <= result["test_accuracy"] <= 1:
        raise RunShapeError("result.test_accuracy", f"must be in [0, 1]; got {brief(result['test_accuracy'])}")
    if (stack := result.get("stack")) is not None:
        check_stack(stack)
    if (audit := result.get("audit")) is not None:
        check_audit(audit)
    if (restart := result.get("restart")) is not None:
        check_restart(restart)


def check_restart(restart: Mapping[str, Any]) -> None:
    """A restarted run's earlier attempts (`TrainingPlan.restart`), as the run panel shows them."""
    try:
        check_plan({k: restart.get(k) for k in ("earlier_attempts", "earlier_noise")})
    except RunShapeError as exc:
        raise RunShapeError(f"result.restart.{exc.field.removeprefix('plan.')}", str(exc).split(": ", 1)[1]) from None
    if not (_number(alone := restart.get("epsilon_this_attempt")) and alone >= 0):
        raise RunShapeError("result.restart.epsilon_this_attempt", f"must be a number; got {brief(alone)}")
    if not isinstance(sentence := restart.get("sentence"), str):
        raise RunShapeError("result.restart.sentence", f"must be a string; got {brief(sentence)}")


def check_audit(audit: Any) -> None:
    """An audited run's canaries (`engine.training.canaries`): the numbers the run panel shows beside ε."""
    if not isinstance(audit, Mapping):
        raise RunShapeError("result.audit", f"must be an object; got {brief(audit)}")
    for key in AUDIT_FIELDS:
        if not _finite(audit.get(key)):
            raise RunShapeError(f"result.audit.{key}", f"must be a number; got {brief(audit.get(key))}")


def check_stack(stack: Mapping[str, Any]) -> None:
    for key in STACK_NUMBERS:
        if not _finite(stack.get(key)):
            raise RunShapeError(f"result.stack.{key}", f"must be a number; got {brief(stack.get(key))}")
    joint = next((key for key in JOINT_EPSILONS if key in stack), JOINT_EPSILONS[0])
    value = stack.get(joint)
    if not (_finite(value) if joint == "joint_epsilon_rdp" else _number(value) and value >= 0):
        raise RunShapeError(f"result.stack.{joint}", f"must be a number; got {brief(value)}")
    if not isinstance(accountant := stack.get("joint_accountant", ""), str):
        raise RunShapeError("result.stack.joint_accountant", f"must be a string; got {brief(accountant)}")


def check_shown_fields(
    *, status: RunStatus, spec: Mapping[str, Any], plan: Mapping[str, Any] | None, result: Mapping[str, Any] | None
) -> None:
    """`RunShapeError` naming the first field a page could not show; a finished run must have a result."""
    check_spec(spec)
    if plan is not None:
        check_plan(plan)
    if result is None:
        if status is RunStatus.FINISHED:
            raise RunShapeError("result", "missing; a finished run has a result")
        return
    check_result(result)

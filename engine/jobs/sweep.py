"""Sweeps: a grid spec expands into runs that share a sweep id, so a frontier can be drawn while
they finish.

A grid spec is a JSON object:

    {"name": "σ × lot size", "base": {...a run spec...},
     "grid": {"noise_multiplier": [0.8, 1.2, 2.0], "lot_size": [64, 256]},
     "seeds": [0, 1, 2], "on_worker_lost": "fail"}

`grid` holds one or two spec keys, each with a list of values; `seeds` (default: the base spec's
seed) repeats every grid point. Every point is validated as a run spec before anything is queued,
and a point's error names the point. Setting `noise_multiplier` or `target_epsilon` in the grid
replaces the other in the base (they are alternatives), unless the base fills its budget (`fill_budget`: σ and
the target ε both apply). Points answered by the result cache (or
already queued) join the sweep without training again, unless `force`.

`search` (instead of `seeds`) makes it a private search (`engine.jobs.search`): a random number of trials,
each a grid point drawn at random with a random seed; only the best is meant for release, and its ε is the
search's, not the composition of every run. Its trials never stack: the analysis needs independent runs.

`vectorize` (default true) stacks the new runs: runs whose specs can train together (equal
`stack_key`: same data, model and lots, e.g. a σ or seed grid; not a grid over the model or the lot
size) are cut, in grid order, into stacks of at most `DPLAB_STACK_MAX` runs that one worker trains
as one vectorized model, sharing Poisson lots. A stack of one is an ordinary run; `false` stacks none.
"""

import itertools
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cache import Answer, NewRun, Store
from engine.jobs import settings
from engine.jobs.options import split_job_options
from engine.jobs.release import RunToRelease
from engine.jobs.search import SweepPrivacy, draw_trials, parse_search, sweep_privacy
from engine.jobs.submission import new_run
from engine.privacy import PrivacyError
from engine.privacy.selection import TrialCount
from engine.training import RunSpec, SpecError, parse_spec, plan_spec, stack_key
from engine.training.config.keys import ALL_KEYS
from engine.training.config.text import bad_text

SWEEP_KEYS = ("name", "base", "grid", "seeds", "search", "on_worker_lost", "vectorize")
MAX_PARAMETERS = 2
MAX_VALUES = 100
MAX_SEEDS = 50
MAX_RUNS = 1000
ALTERNATIVES = {"noise_multiplier": "target_epsilon", "target_epsilon": "noise_multiplier"}


class SweepError(SpecError):
    """A grid spec is malformed, or one of its points is not a valid run spec."""


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    values: dict[str, Any]  # the grid parameters' values and the seed
    spec: dict[str, Any]  # the raw run spec of this point (job options included)


@dataclass(frozen=True, kw_only=True)
class SweepSubmission:
    sweep_id: str
    run_ids: tuple[str, ...]
    created: int
    cached: int
    existing: int  # identical runs already queued or running
    stacks: int = 0  # stacks (of two runs or more) among the created runs
    stacked: int = 0  # created runs in those stacks

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep_id,
            "run_ids": list(self.run_ids),
            "created": self.created,
            "cached": self.cached,
            "existing": self.existing,
            "stacks": self.stacks,
            "stacked": self.stacked,
        }


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def grid_configurations(raw: Any) -> list[SweepPoint]:
    """The grid points of a grid spec without their seeds (each at the base spec's seed), in order (first
    parameter slowest), after checking every key but `seeds` and `search`."""
    if not isinstance(raw, Mapping):
        raise SweepError("sweep", f"must be a JSON object, got {type(raw).__name__}")
    if (bad := bad_text(raw, "")) is not None:
        raise SweepError(*bad)
    unknown = sorted(set(raw) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(unknown[0], f"unknown key; allowed keys: {', '.join(SWEEP_KEYS)}")
    if "name" in raw and not (isinstance(raw["name"], str) and len(raw["name"]) <= 200):
        raise SweepError("name", "must be a string of at most 200 characters")
    if "vectorize" in raw and not isinstance(raw["vectorize"], bool):
        raise SweepError("vectorize", f"must be true or false, got {json.dumps(raw['vectorize'])}")
    base = raw.get("base")
    if not isinstance(base, Mapping):
        raise SweepError("base", "missing or not a JSON object: the run spec every point starts from")
    grid = raw.get("grid")
    if not isinstance(grid, Mapping) or not 1 <= len(grid) <= MAX_PARAMETERS:
        raise SweepError("grid", f"must be an object of 1 to {MAX_PARAMETERS} spec keys, each with a list of values")
    for key, values in grid.items():
        if key not in ALL_KEYS or key == "seed":
            raise SweepError(f"grid.{key}", "not a spec key that can be swept (seeds go in 'seeds')")
        if not isinstance(values, list) or not 1 <= len(values) <= MAX_VALUES:
            raise SweepError(f"grid.{key}", f"must be a list of 1 to {MAX_VALUES} values")
        if not all(_is_scalar(v) or isinstance(v, list | dict) for v in values):
            raise SweepError(f"grid.{key}", "values must be JSON values")
        encoded = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(encoded)) != len(encoded):
            raise SweepError(f"grid.{key}", "has a repeated value")
    points = []
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        spec = dict(base)
        for key in grid:
            if base.get("fill_budget") is not True:  # a filled budget takes both: σ kept, the steps up to ε
                spec.pop(ALTERNATIVES.get(key, ""), None)
        spec.update(values)
        points.append(SweepPoint(values=values, spec=spec))
    return points


def sweep_seeds(raw: Mapping[str, Any]) -> list[int]:
    """The seeds every grid point trains with (a fixed grid's)."""
    seeds = raw.get("seeds", [raw["base"].get("seed", 0)])
    integers = isinstance(seeds, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    if not integers or not 1 <= len(seeds) <= MAX_SEEDS or len(set(seeds)) != len(seeds):
        raise SweepError("seeds", f"must be a list of 1 to {MAX_SEEDS} distinct integers")
    return seeds


def sweep_search(raw: Mapping[str, Any]) -> TrialCount | None:
    """The trial count of a private search, or None for a fixed grid."""
    if "search" not in raw:
        return None
    if "seeds" in raw:
        raise SweepError("seeds", "a private search draws every trial's seed at random: give 'search' or 'seeds'")
    try:
        return parse_search(raw["search"])
    except SpecError as exc:
        raise SweepError(exc.field, str(exc).split(": ", 1)[1]) from None


def expand_sweep(raw: Any) -> list[SweepPoint]:
    """The runs of a grid spec, in order: every grid point × every seed (first parameter slowest, seeds fastest),
    or, for a private search, the trials it draws (a new draw on every call)."""
    configurations = grid_configurations(raw)
    if (trials := sweep_search(raw)) is not None:
        drawn = draw_trials([point.spec for point in configurations], trials)
        keys = [*list(raw["grid"]), "seed"]
        return [SweepPoint(values={k: spec[k] for k in keys}, spec=spec) for spec in drawn]
    seeds = sweep_seeds(raw)
    total = len(seeds) * len(configurations)
    if total > MAX_RUNS:
        raise SweepError("grid", f"expands to {total} runs; at most {MAX_RUNS} per sweep")
    return [
        SweepPoint(values=point.values | {"seed": seed}, spec=point.spec | {"seed": seed})
        for point in configurations
        for seed in seeds
    ]


def privacy_of_sweep(raw: Any, runs: Sequence[RunToRelease] | None = None) -> SweepPrivacy:
    """What releasing the best run of this grid spec costs, as a fixed grid, the same grid trained every point
    separately, and as a private search (`engine.jobs.search.sweep_privacy`). `runs`: the sweep's runs as they
    are in the store (with their stacks, and the earlier attempts of a restart), once submitted; before, the
    fixed grid is planned with the stacks `submit_sweep` would cut if no run answered a point yet."""
    configurations = grid_configurations(raw)
    trials = sweep_search(raw)
    try:
        training = [split_job_options(point.spec)[0] for point in configurations]
        if trials is not None:  # the fixed grid it is compared with: every configuration once, alone
            grid, drawn = [RunToRelease(spec=spec) for spec in training], runs
        else:
            grid, drawn = (list(runs) if runs is not None else planned_grid(raw)), None
        return sweep_privacy(training, grid, trials=trials, drawn=drawn)
    except (SpecError, PrivacyError) as exc:
        raise SweepError("grid", str(exc)) from None


def planned_grid(raw: Mapping[str, Any]) -> list[RunToRelease]:
    """The runs of a fixed grid spec, each with the stack `submit_sweep` cuts for it when every point trains anew
    (`vectorize`, the default; `DPLAB_STACK_MAX` members at most)."""
    specs = [split_job_options(point.spec)[0] for point in expand_sweep(raw)]
    stacks = (
        assign_stacks([parse_spec(spec) for spec in specs], most=settings.stack_max())
        if raw.get("vectorize", True)
        else [None] * len(specs)
    )
    return [RunToRelease(spec=spec, stack=stack) for spec, stack in zip(specs, stacks, strict=True)]


def point_label(values: Mapping[str, Any]) -> str:
    """A grid point as errors name it: "lr=0.5, seed=0"."""
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in values.items())


def assign_stacks(specs: Sequence[RunSpec | None], *, most: int) -> list[str | None]:
    """The stack id of each run (None: it trains alone). Runs with equal non-None `stack_key` are cut,
    in order, into chunks of at most `most`; every chunk of two or more gets a fresh id. A None spec
    (a run not created here) never stacks."""
    groups: dict[str, list[int]] = {}
    for position, spec in enumerate(specs):
        key = stack_key(spec) if spec is not None else None
        if key is not None:
            groups.setdefault(key, []).append(position)
    stacks: list[str | None] = [None] * len(specs)
    for positions in groups.values():
        for start in range(0, len(positions), most):
            chunk = positions[start : start + most]
            if len(chunk) >= 2:
                stack_id = "k" + uuid.uuid4().hex[:11]
                for position in chunk:
                    stacks[position] = stack_id
    return stacks


def submit_sweep(store: Store, raw: Any, *, force: bool = False) -> SweepSubmission:
    """Validate and plan every point, then create the sweep and its new runs (stacked, unless `vectorize` is
    false) in one transaction. Stacks are cut among the points no run answers yet; the store decides
    again inside its transaction, and a point answered meanwhile joins as that run, outside its stack."""
    points = expand_sweep(raw)
    members: list[tuple[dict[str, Any], NewRun]] = []
    new_specs: list[RunSpec | None] = []  # the parsed spec of each member no run answers now
    seen: dict[str, str] = {}
    for point in points:
        try:
            training, options = split_job_options(
                {**point.spec, **({"on_worker_lost": raw["on_worker_lost"]} if "on_worker_lost" in raw else {})}
            )
            parsed = parse_spec(training)
            run = new_run(parsed, options)
            plan_spec(parsed)  # a point no worker could train (an unreachable target ε): refused, nothing stored
        except (SpecError, PrivacyError) as exc:
            raise SweepError(f"grid point {point_label(point.values)}", str(exc)) from None
        if run.cache_key in seen:
            raise SweepError("grid", f"points {seen[run.cache_key]} and {point_label(point.values)} train the same run")
        seen[run.cache_key] = point_label(point.values)
        members.append((point.values, run))
        new_specs.append(parsed if force or store.answering_run(run.cache_key) is None else None)
    # a search's trials must be independent runs (Papernot & Steinke's analysis): they never share lots in a stack
    stacked = raw.get("vectorize", True) and "search" not in raw
    stacks = assign_stacks(new_specs, most=settings.stack_max()) if stacked else []
    for position, stack in enumerate(stacks):
        if stack is not None:
            values, run = members[position]
            members[position] = (values, replace(run, stack=stack))
    spec = {k: raw[k] for k in SWEEP_KEYS if k in raw}
    sweep_id, answers = store.create_sweep(spec=spec, name=raw.get("name"), members=members, force=force)
    created = [stacks[i] if stacks else None for i, (_, a) in enumerate(answers) if a is Answer.CREATED]
    stacked = [s for s in created if s is not None and created.count(s) > 1]
    return SweepSubmission(
        sweep_id=sweep_id,
        run_ids=tuple(run_id for run_id, _ in answers),
        created=len(created),
        cached=sum(a is Answer.CACHED for _, a in answers),
        existing=sum(a is Answer.EXISTING for _, a in answers),
        stacks=len(set(stacked)),
        stacked=len(stacked),
    )

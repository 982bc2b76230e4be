"""Submitting a validated spec: served from the result cache when an identical run finished."""

from dataclasses import dataclass

from cache import RunStatus, Store
from engine import ENGINE_VERSION
from engine.training import RunSpec


@dataclass(frozen=True, kw_only=True)
class Submission:
    run_id: str
    cached: bool  # an identical spec already finished on this engine version: its stored result
    existing: bool  # an identical spec is already queued or running: that run is returned


def submit(store: Store, spec: RunSpec, *, force: bool = False) -> Submission:
    key = spec.cache_key(ENGINE_VERSION)
    if not force:
        done = store.find_by_key(key, [RunStatus.FINISHED])
        if done is not None:
            return Submission(run_id=done.id, cached=True, existing=True)
        active = store.find_by_key(key, [RunStatus.QUEUED, RunStatus.RUNNING])
        if active is not None:
            return Submission(run_id=active.id, cached=False, existing=True)
    run_id = store.create_run(spec=spec.to_dict(), cache_key=key, engine_version=ENGINE_VERSION)
    return Submission(run_id=run_id, cached=False, existing=False)

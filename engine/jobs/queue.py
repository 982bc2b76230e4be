"""Submitting a validated spec: served from the result cache when an identical run finished.

A run's identity (its cache key) is the hash of its canonical, validated spec plus the engine
version: an identical submission returns the finished run at once (`cached`), or the identical run
already queued or running (`existing`), unless `force` asks for a new run. A new engine version
changes every key, so older results stop being served without being deleted.
"""

from dataclasses import dataclass

from cache import NewRun, RunStatus, Store
from engine import ENGINE_VERSION
from engine.jobs.options import JobOptions
from engine.training import RunSpec


@dataclass(frozen=True, kw_only=True)
class Submission:
    run_id: str
    cached: bool  # an identical spec already finished on this engine version: its stored result
    existing: bool  # an identical spec is already queued or running: that run is returned

    def to_dict(self) -> dict:
        return {"id": self.run_id, "cached": self.cached, "existing": self.existing}


def answer_from_store(store: Store, key: str) -> Submission | None:
    """The run that already answers `key`: finished (a cache hit), else queued or running."""
    done = store.find_by_key(key, [RunStatus.FINISHED])
    if done is not None:
        return Submission(run_id=done.id, cached=True, existing=True)
    active = store.find_by_key(key, [RunStatus.QUEUED, RunStatus.RUNNING])
    if active is not None:
        return Submission(run_id=active.id, cached=False, existing=True)
    return None


def new_run(spec: RunSpec, options: JobOptions) -> NewRun:
    return NewRun(spec=spec.to_dict(), cache_key=spec.cache_key(ENGINE_VERSION), engine_version=ENGINE_VERSION,
                  requeues=options.requeues)  # fmt: skip


def submit(store: Store, spec: RunSpec, *, force: bool = False, options: JobOptions | None = None,
           planned_noise_multiplier: float | None = None) -> Submission:  # fmt: skip
    """Queue `spec` (or answer from the cache). `planned_noise_multiplier`: the σ the submitter already
    calibrated for it; the worker checks it with its own accountant instead of searching again."""
    run = new_run(spec, options or JobOptions())
    if not force and (answer := answer_from_store(store, run.cache_key)) is not None:
        return answer
    plan = {"noise_multiplier": planned_noise_multiplier} if planned_noise_multiplier is not None else None
    run_id = store.create_run(spec=run.spec, cache_key=run.cache_key, engine_version=run.engine_version,
                              requeues=run.requeues, plan=plan)  # fmt: skip
    return Submission(run_id=run_id, cached=False, existing=False)

"""Submitting a validated spec: served from the result cache when an identical run finished.

A run's identity (its cache key) is the hash of its canonical, validated spec plus the engine
version: an identical submission returns the finished run at once (`cached`), or the identical run
already queued or running (`existing`), unless `force` asks for a new run. The store looks and inserts
in one transaction, so concurrent identical submissions make one run. A new engine version changes
every key, so older results stop being served without being deleted. Imported runs answer only when
the user trusted their archive at import (`engine.jobs.transfer`), and are then marked `imported`.
"""

import time
from dataclasses import dataclass

from cache import Answer, NewRun, RunStatus, Store
from engine import ENGINE_VERSION
from engine.jobs.options import JobOptions
from engine.training import RunSpec, plan_spec


@dataclass(frozen=True, kw_only=True)
class Submission:
    run_id: str
    cached: bool  # an identical spec already finished on this engine version: its stored result
    existing: bool  # an identical spec is already queued or running (or finished, when cached): that run
    imported: bool = False  # the answering run came from an archive whose results the user chose to trust

    def to_dict(self) -> dict:
        return {"id": self.run_id, "cached": self.cached, "existing": self.existing, "imported": self.imported}


def _submission(store: Store, run_id: str, answer: Answer) -> Submission:
    imported = answer is not Answer.CREATED and store.get_run(run_id).imported
    return Submission(
        run_id=run_id, cached=answer is Answer.CACHED, existing=answer is not Answer.CREATED, imported=imported
    )


def answer_from_store(store: Store, key: str) -> Submission | None:
    """The run that already answers `key`: finished (a cache hit), else queued or running."""
    found = store.answering_run(key)
    return None if found is None else _submission(store, *found)


def new_run(spec: RunSpec, options: JobOptions, *, plan: dict | None = None) -> NewRun:
    return NewRun(
        spec=spec.to_dict(),
        cache_key=spec.cache_key(ENGINE_VERSION),
        engine_version=ENGINE_VERSION,
        requeues=options.requeues,
        plan=plan,
    )


def submit(
    store: Store,
    spec: RunSpec,
    *,
    force: bool = False,
    options: JobOptions | None = None,
    planned_noise_multiplier: float | None = None,
) -> Submission:
    """Queue `spec` (or answer from the cache, or with the identical run already queued), in one store
    transaction. `planned_noise_multiplier`: the σ the submitter already calibrated for it; the worker
    checks it with its own accountant instead of searching again. Without one, the spec is planned first, so a
    run no worker could train (a target ε no σ in range reaches) is refused here, as a `PrivacyError`, and never
    queued."""
    if planned_noise_multiplier is None:
        plan_spec(spec)
    plan = {"noise_multiplier": planned_noise_multiplier} if planned_noise_multiplier is not None else None
    return _submission(store, *store.submit(new_run(spec, options or JobOptions(), plan=plan), force=force))


def await_first_step(store: Store, run_id: str, *, timeout_s: float, unclaimed_s: float, poll_s: float = 0.03) -> None:
    """Wait until a worker has stored the run's first training step (or the run ended), for at most `timeout_s`;
    give up after `unclaimed_s` while no worker has claimed it (none is free, or none runs). The dashboard calls
    it right after Train is pressed so that the same redraw plots the first point, instead of waiting for the
    next poll of the browser (~1 s more on a busy machine)."""
    started = time.monotonic()
    while (waited := time.monotonic() - started) < timeout_s:
        run = store.get_run(run_id)
        if run.progress_step > 0 or not run.status.active or (run.status is RunStatus.QUEUED and waited > unclaimed_s):
            return
        time.sleep(poll_s)

"""The checks across the fields of an archived run: each field may be well formed on its own
(`cache.archive.format`) and the record still impossible. Every rule here holds for any run a store of the
lab records, whatever its engine version, so an archive that breaks one was edited or damaged:

- its times (created, started, finished, each status event's) between 2000-01-01 and a day from now
  (`cache.archive.format.check_time`), and in order: started at or after it was created, ended at or after
  it started (and was created); a default export floors them to the UTC day, which keeps the order;
- `attempts`, the times it was claimed by a worker, equals the number of `running` events in its status
  history (each claim adds one and records one); a run cancelled before it started has 0, as does a run
  recorded before the status history existed;
- its last status event is its status (every change of status records one);
- `progress_step` at most `total_steps`, which equals the plan's `steps` when both are given;
- a result's `steps` at most its `planned_steps`, and at most the run's `total_steps`;
- a finished run's metric rows at steps up to `total_steps` (`metric_step_limit`; the reader checks each row).

Each raises `ArchiveError` naming the run and the field, with the values that disagree. An import checks
them once a run has the shape the pages read (`engine.jobs.transfer.rekey`), so a record that is both
malformed and inconsistent is refused for its shape first; the writer checks them on what it writes
(`ArchiveReader.check_all`).
"""

import time

from cache.archive.format import ArchivedRun, ArchiveError, check_time
from cache.store.records import RunStatus


def _when(at: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    except (OverflowError, OSError, ValueError):
        return repr(at)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def run_where(index: int | None, run_id: str) -> str:
    """How a message names a run of runs.json."""
    return f"runs.json: run {run_id}" if index is None else f"runs.json: runs[{index}] (id {run_id})"


def check_consistent(run: ArchivedRun, where: str) -> None:
    """Refuse a run whose fields contradict one another or hold an impossible time (`where` names it)."""
    created, started, finished = run.created_at, run.started_at, run.finished_at
    for field, at in (("created_at", created), ("started_at", started), ("finished_at", finished)):
        if at is not None:
            check_time(at, f"{where}: {field}")
    for event in run.events:
        check_time(event.at, f"{where}: events[seq {event.seq}].at")
    if started is not None and started < created:
        raise ArchiveError(
            f"{where}: started_at ({_when(started)}) is before created_at ({_when(created)}); a run starts after "
            "it is created"
        )
    if finished is not None and finished < (started if started is not None else created):
        field, at = ("started_at", started) if started is not None else ("created_at", created)
        raise ArchiveError(
            f"{where}: finished_at ({_when(finished)}) is before {field} ({_when(at)}); a run ends after it starts"
        )
    starts = sum(1 for e in run.events if e.status is RunStatus.RUNNING)
    if run.attempts != starts:
        raise ArchiveError(
            f"{where}: attempts is {run.attempts} but its status history shows {starts} start(s); attempts counts "
            "the times a worker started the run (at least 1 for a run that ran)"
        )
    if run.events and run.events[-1].status is not run.status:
        raise ArchiveError(
            f"{where}: status is {run.status.value} but its last status event (seq {run.events[-1].seq}) is "
            f"{run.events[-1].status.value}; the history ends with the run's status"
        )
    if run.total_steps is not None and run.progress_step > run.total_steps:
        raise ArchiveError(
            f"{where}: progress_step {run.progress_step} is above total_steps {run.total_steps}; a run's progress "
            "is at most its planned steps"
        )
    planned = (run.plan or {}).get("steps")
    if run.total_steps is not None and _whole(planned) and planned != run.total_steps:
        raise ArchiveError(f"{where}: total_steps {run.total_steps} differs from the plan's steps {planned}")
    result = run.result or {}
    steps, result_planned = result.get("steps"), result.get("planned_steps")
    if _whole(steps) and _whole(result_planned) and steps > result_planned:
        raise ArchiveError(
            f"{where}: result.steps {steps} is above result.planned_steps {result_planned}; a run takes at most "
            "its planned steps"
        )
    if _whole(steps) and run.total_steps is not None and steps > run.total_steps:
        raise ArchiveError(
            f"{where}: result.steps {steps} is above total_steps {run.total_steps}; a run takes at most its "
            "planned steps"
        )


def metric_step_limit(run: ArchivedRun) -> int | None:
    """The last step a run's metric rows may have (None: no limit): a finished run's total steps."""
    return run.total_steps if run.status is RunStatus.FINISHED else None

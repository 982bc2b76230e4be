"""Job options: keys a submitted spec may carry beside the training spec. They say how the queue
treats the run, not what it trains, so they are not part of the run's identity (its cache key).

- `on_worker_lost`: "fail" (default) marks the run failed ("worker lost") when its worker dies;
  "requeue" puts it back in the queue once, and fails it if that attempt's worker dies too.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.privacy.limits import brief
from engine.training import SpecError

ON_WORKER_LOST = ("fail", "requeue")
JOB_KEYS = ("on_worker_lost",)


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    on_worker_lost: str = "fail"

    @property
    def requeues(self) -> int:
        return 1 if self.on_worker_lost == "requeue" else 0


def split_job_options(raw: Any) -> tuple[Any, JobOptions]:
    """(the training spec, the job options) of a submitted JSON object."""
    if not isinstance(raw, Mapping):
        return raw, JobOptions()
    training = {k: v for k, v in raw.items() if k not in JOB_KEYS}
    value = raw.get("on_worker_lost", "fail")
    if value not in ON_WORKER_LOST:
        raise SpecError("on_worker_lost", f"must be one of {', '.join(map(repr, ON_WORKER_LOST))}, got {brief(value)}")
    return training, JobOptions(on_worker_lost=value)

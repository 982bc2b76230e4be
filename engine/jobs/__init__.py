"""Jobs: submitting runs to the store's queue (with the result cache) and the worker that trains them."""

from engine.jobs.queue import Submission, submit
from engine.jobs.worker import Worker, default_data_dirs

__all__ = ["Submission", "Worker", "default_data_dirs", "submit"]

"""A worker's heartbeat on a store that cannot be written (a full disk, a damaged file) logs one line, not a
traceback every beat, and says so again only after a beat got through."""

import logging
import time

from cache import StoreFull
from engine.jobs.workers.worker import Heartbeat


class FlakyStore:
    """Beat k fails with a full disk where `pattern[k]` is "x" (and after the pattern), answers where it is "."."""

    def __init__(self, pattern: str):
        self.pattern, self.beats = pattern, 0

    def heartbeat(self, worker, run_ids):
        self.beats += 1
        if self.beats > len(self.pattern) or self.pattern[self.beats - 1] == "x":
            raise StoreFull("the disk holding the store is full; free space and retry")
        return set()


def test_a_store_that_cannot_be_written_is_logged_once_per_outage(caplog):
    store = FlakyStore("xxxxx.xxxx")  # an outage of 5 beats, one beat through, an outage until the end
    with caplog.at_level(logging.WARNING, logger="dplab.worker"), Heartbeat(store, "w", every_s=0.001):
        deadline = time.monotonic() + 30
        while store.beats < 20 and time.monotonic() < deadline:
            time.sleep(0.005)
    records = [r for r in caplog.records if "heartbeat" in r.getMessage()]
    assert store.beats >= 20
    assert len(records) == 2, [r.getMessage() for r in records]
    assert all(r.exc_info is None and "free space" in r.getMessage() for r in records)

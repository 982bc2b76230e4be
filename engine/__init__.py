"""DP lab engine: privacy accounting (`engine.privacy`), DP training (`engine.training`) and the
job queue with its workers (`engine.jobs`); `engine.api`, the notebook API, is also reachable as
`engine.plan`, `engine.calibrate`, `engine.epsilons`, `engine.train`, `engine.submit`, `engine.runs` and
`engine.metrics` (loaded on first use, so `import engine.privacy` stays free of torch).

`ENGINE_VERSION` is part of every run's cache key: bump it whenever a change alters what a spec
trains to, so that old cached results are no longer served as if this engine had produced them.
"""

from typing import Any

ENGINE_VERSION = "0.5.0"
API = ("calibrate", "epsilons", "metrics", "open_store", "plan", "runs", "spec", "submit", "train")


def __getattr__(name: str) -> Any:
    if name in API:
        from engine import api

        return getattr(api, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")

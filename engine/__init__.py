"""DP lab engine: privacy accounting (`engine.privacy`), DP training (`engine.training`) and the
job queue with its workers (`engine.jobs`).

`ENGINE_VERSION` is part of every run's cache key: bump it whenever a change alters what a spec
trains to, so that old cached results are no longer served as if this engine had produced them.
"""

ENGINE_VERSION = "0.4.0"

"""Jobs: the queue with its result cache (`queue`), sweeps (`sweep`), job options (`options`), the
workers that take runs off the queue (`workers/`: the local worker, its pool, the Ray backend, the warm-up),
export and import (`transfer`). The store side of a run is `recording`; the training side, `run_training`, imports no
store, so it can run on hosts that cannot see the SQLite file.

Submodules are imported directly (`from engine.jobs.submission import submit`): importing this package
imports nothing else, so a Ray task loads the training side only.
"""

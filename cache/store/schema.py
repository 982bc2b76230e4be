"""The store's schema as numbered migrations, applied in order at open (`PRAGMA user_version` is the
number applied). A migration is never edited once released: changes go in a new one."""

MIGRATIONS: tuple[str, ...] = (
    # 1: runs and their per-step metrics
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        cache_key TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        engine_version TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        heartbeat_at REAL,
        worker TEXT,
        total_steps INTEGER,
        progress_step INTEGER NOT NULL DEFAULT 0,
        plan_json TEXT,
        result_json TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_by_status ON runs (status, created_at);
    CREATE INDEX runs_by_key ON runs (cache_key, status);
    CREATE TABLE metrics (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        name TEXT NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_id, step, name)
    ) WITHOUT ROWID;
    """,
    # 2: status history, sweeps, worker registry, requeue-once after a lost worker
    """
    ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN requeues_left INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN imported INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX runs_by_worker ON runs (worker, status);
    CREATE TABLE run_events (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        status TEXT NOT NULL,
        worker TEXT,
        detail TEXT,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    INSERT INTO run_events (run_id, seq, at, status, worker, detail)
        SELECT id, 0, created_at, status, worker, 'recorded before status history existed' FROM runs;
    CREATE TABLE sweeps (
        id TEXT PRIMARY KEY,
        name TEXT,
        spec_json TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE sweep_runs (
        sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        point_json TEXT NOT NULL,
        PRIMARY KEY (sweep_id, position)
    ) WITHOUT ROWID;
    CREATE INDEX sweep_runs_by_run ON sweep_runs (run_id);
    CREATE TABLE workers (
        name TEXT PRIMARY KEY,
        backend TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        device TEXT,
        started_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        current_run TEXT,
        stopped_at REAL,
        stop_reason TEXT
    );
    """,
    # 3: stacks, the runs of a sweep that a worker trains together as one vectorized model
    """
    ALTER TABLE runs ADD COLUMN stack_id TEXT;
    CREATE INDEX runs_by_stack ON runs (stack_id, status);
    """,
    # 4: imported runs answer submissions only when the user trusted their archive at import; those imported
    # before this choice existed kept this engine's key: they stop answering (their key gains "imported:")
    """
    UPDATE runs SET cache_key = 'imported:' || cache_key WHERE imported = 1 AND instr(cache_key, ':') = 0;
    """,
    # 5: the names users give their runs (labels only: no spec, result or cache key changes)
    """
    CREATE TABLE run_names (run_id TEXT PRIMARY KEY, name TEXT NOT NULL);
    """,
    # 6: what each earlier attempt of a restarted run released before it went back to the queue (its metrics are
    # dropped, its releases are charged to the next attempt's ledger)
    """
    ALTER TABLE runs ADD COLUMN earlier_attempts_json TEXT;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

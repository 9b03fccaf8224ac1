-- Shared model-call limits, as in PostgreSQL's 0010 (ADR-0075); times are microseconds
-- since the epoch, like every sqlite time. The budget's rules are in the client
-- (noeta/backends/stores/sqlite/model_limits.py), under the append's write lock.
CREATE TABLE model_limits (
    key            TEXT PRIMARY KEY,
    rpm            INTEGER CHECK (rpm > 0),
    tpm            INTEGER CHECK (tpm > 0),
    requests_at    INTEGER,
    tokens_at      INTEGER,
    paused_until   INTEGER,
    calls          INTEGER NOT NULL DEFAULT 0,
    handbacks      INTEGER NOT NULL DEFAULT 0,
    waited_seconds REAL NOT NULL DEFAULT 0,
    throttled      INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT model_limits_limit_something CHECK (rpm IS NOT NULL OR tpm IS NOT NULL)
);

CREATE TABLE model_limit_holds (
    task_id   TEXT PRIMARY KEY,
    until     INTEGER NOT NULL,
    limit_key TEXT NOT NULL
);

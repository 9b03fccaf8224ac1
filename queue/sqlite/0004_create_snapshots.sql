-- Folded task states, so that a long log need not be folded from its start. A snapshot's
-- version is a hash of the code that folds; a worker of another version ignores it. A
-- snapshot may be missing, never wrong: the log stays the truth.
CREATE TABLE snapshots (
    task_id    TEXT NOT NULL REFERENCES tasks (id),
    version    TEXT NOT NULL,
    -- The last log seq folded into data.
    seq        INTEGER NOT NULL,
    data       BLOB NOT NULL,
    -- Microseconds since the Unix epoch (see 0001).
    created_at INTEGER NOT NULL
                   DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    PRIMARY KEY (task_id, version)
);

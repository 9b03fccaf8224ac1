-- Folded task states, so that a long log need not be folded from its start. A snapshot's
-- version is a hash of the code that folds; a worker of another version ignores it. A
-- snapshot may be missing, never wrong: the log stays the truth.
CREATE TABLE snapshots (
    task_id    text NOT NULL REFERENCES tasks (id),
    version    text NOT NULL,
    -- The last log seq folded into data.
    seq        bigint NOT NULL,
    data       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (task_id, version)
);

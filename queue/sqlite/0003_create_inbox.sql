-- Deliveries to a task (messages, answers, handbacks, background job results), each taken
-- by exactly one append of that task's log.
CREATE TABLE inbox (
    -- AUTOINCREMENT, like bigserial: an id is never handed out twice, even if the highest
    -- entry were ever deleted, so an id an append names in `take` means one delivery only.
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT NOT NULL REFERENCES tasks (id),
    -- A second delivery with the same key to the same task is dropped (at-most-once
    -- delivery for senders that retry, e.g. a handback re-run after a crash). NULL keys
    -- never collide, as in PostgreSQL.
    dedupe_key TEXT,
    payload    TEXT NOT NULL,
    -- The seq of the append that took this entry; NULL until then. Set in the same
    -- transaction as that append, so a message is taken exactly once.
    taken_seq  INTEGER,
    -- Microseconds since the Unix epoch (see 0001).
    created_at INTEGER NOT NULL
                   DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    CONSTRAINT inbox_dedupe UNIQUE (task_id, dedupe_key)
);

-- A claimer reads what is left to take; taken entries are history.
CREATE INDEX inbox_untaken ON inbox (task_id, id) WHERE taken_seq IS NULL;

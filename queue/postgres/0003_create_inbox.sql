-- Deliveries to a task (messages, answers, handbacks, background job results), each taken
-- by exactly one append of that task's log.
CREATE TABLE inbox (
    id         bigserial PRIMARY KEY,
    task_id    text NOT NULL REFERENCES tasks (id),
    -- A second delivery with the same key to the same task is dropped (at-most-once
    -- delivery for senders that retry, e.g. a handback re-run after a crash).
    dedupe_key text,
    payload    text NOT NULL,
    -- The seq of the append that took this entry; NULL until then. Set in the same
    -- transaction as that append, so a message is taken exactly once.
    taken_seq  bigint,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT inbox_dedupe UNIQUE (task_id, dedupe_key)
);

-- A claimer reads what is left to take; taken entries are history.
CREATE INDEX inbox_untaken ON inbox (task_id, id) WHERE taken_seq IS NULL;

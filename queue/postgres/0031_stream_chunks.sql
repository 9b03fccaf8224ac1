-- Streamed replies (issue 34 items 3-4, ADR-0105): the text of a model reply as it
-- arrives, kept beside the log for the readers that follow a task (`noeta tail
-- --follow`, `AsyncClient.stream`), never in it. UNLOGGED: no WAL, so a flush commits
-- without waiting for a disk flush and replicas do not carry it; a crash of the server
-- empties it (readers see a gap and are told; the reply itself is in the log).
-- Written only by a worker's stream writer, over the pool and outside any fenced append,
-- and only for a task someone follows (stream_followers): a task nobody reads writes
-- nothing here (ADR-0085).
CREATE UNLOGGED TABLE stream_chunks (
    task_id     text NOT NULL,
    call_seq    bigint NOT NULL,   -- the seq of the ModelCalled the stream answers
    attempt     integer NOT NULL,  -- the provider retry within that call, from 1
    seq         integer NOT NULL,  -- per stream, from 1: the readers' cursor
    kind        text NOT NULL CHECK (kind IN ('text', 'final')),
    block       integer NOT NULL,  -- the reply's block the text belongs to
    char_offset integer NOT NULL,  -- the block's length before this chunk: a gap shows
    data        text NOT NULL,     -- the text; for 'final', the seq of ModelReplied
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- The only index: readers read a task's rows past their cursor in this order.
    PRIMARY KEY (task_id, call_seq, attempt, seq)
);

-- Who follows which task: a reader upserts its task's row (`until` a minute ahead) every
-- 20 s while it reads; a worker reads the rows still current, at most once a second while
-- it streams, and writes chunks only for those tasks. UNLOGGED as the chunks: after a
-- crash readers register again within 20 s.
CREATE UNLOGGED TABLE stream_followers (
    task_id text PRIMARY KEY,
    until   timestamptz NOT NULL
);

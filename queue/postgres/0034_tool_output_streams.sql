-- Tool output streams (issue 34 item 2, ADR-0114): Bash's stdout and stderr, as they are
-- written, go to the same unlogged stream_chunks as a reply's text, for the same readers
-- and only for a task someone follows. A tool's stream is keyed by the seq of its
-- ToolStarted (call_seq), attempt 1; its rows are 'stdout' and 'stderr' (block 0 and 1:
-- each has its own char_offset), one 'truncated' once the stream reached the bound of
-- the stored result, and the 'final' naming the ToolFinished.
ALTER TABLE stream_chunks DROP CONSTRAINT stream_chunks_kind_check;
ALTER TABLE stream_chunks ADD CONSTRAINT stream_chunks_kind_check
    CHECK (kind IN ('text', 'final', 'stdout', 'stderr', 'truncated'));
-- The tool call the rows belong to ('' for a reply's): a reader that resumes mid-stream
-- names the call without reading the log. A constant default: no table rewrite.
ALTER TABLE stream_chunks ADD COLUMN call_id text NOT NULL DEFAULT '';

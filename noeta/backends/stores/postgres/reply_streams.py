"""Streamed replies on PostgreSQL (ADR-0105): the unlogged stream_chunks beside the log,
the followers a worker writes for, and a NOTIFY per flush on the task's own channel.
One statement each; never the task's row, never inside a fenced append."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Mapping, Sequence

from psycopg import sql

from noeta.backends.stores.postgres.wakeups import PostgresWakeups
from noeta.core.ports.reply_streams import FOLLOW_SECONDS, Chunk, ChunksRead, Cursor

# The first flush of a stream removes the task's rows of older streams (a dead worker's,
# an attempt the provider retried): a reader past them has its cursor, one behind reads
# on from the newer stream and is told it restarted. Rows of the last few seconds stay:
# a tool's output ends as the next model call starts, and its readers (who read every
# 50 ms at most) must still find its last rows and final (ADR-0114); its worker removes
# them 2 s after its end. A row already there (a flush sent again after an unknown
# outcome) is kept. The NOTIFY carries nothing: any role may
# LISTEN (POSTGRES-FACTS), so the channel is the task id's hash and the payload empty.
WRITE_CHUNKS = """
WITH cleared AS (
    DELETE FROM stream_chunks
     WHERE %(first)s AND task_id = %(task)s
       AND (call_seq, attempt) < (%(call)s, %(attempt)s)
       AND created_at < now() - interval '5 seconds'
),
written AS (
    INSERT INTO stream_chunks
           (task_id, call_seq, attempt, seq, kind, block, char_offset, data, call_id)
    SELECT %(task)s, c.call_seq, c.attempt, c.seq, c.kind, c.block, c.char_offset, c.data,
           %(call_id)s
      FROM unnest(%(calls)s::bigint[], %(attempts)s::int[], %(seqs)s::int[], %(kinds)s::text[],
                  %(blocks)s::int[], %(offsets)s::int[], %(texts)s::text[])
           AS c (call_seq, attempt, seq, kind, block, char_offset, data)
    ON CONFLICT DO NOTHING
)
SELECT pg_notify(%(channel)s, '')
"""

# A call's streams once its outcome is in the log (and its readers had the time to read
# them): their text goes; a final row stays, saying which event holds the reply. A job's
# rows (call seq 0) are named by its id.
REMOVE_TEXT = """
DELETE FROM stream_chunks
 WHERE task_id = %(task)s AND call_seq = %(call)s AND kind <> 'final'
   AND (%(call)s > 0 OR call_id = %(call_id)s)
"""

# The followers still current: a read, no write (a worker asks at most once a second
# while it streams, whether or not anyone follows).
READ_FOLLOWED = """
SELECT task_id, extract(epoch FROM until - now())::float8
  FROM stream_followers WHERE until > now()
"""

# The same, once a minute: the follows a minute past their end go, with the rows of
# streams nobody follows any more (a reader that left, a worker that died mid-stream).
READ_FOLLOWED_CLEARING = """
WITH expired AS (
    DELETE FROM stream_followers WHERE until < now() - interval '1 minute'
    RETURNING task_id
),
orphaned AS (
    DELETE FROM stream_chunks WHERE task_id IN (SELECT task_id FROM expired)
)
SELECT task_id, extract(epoch FROM until - now())::float8
  FROM stream_followers WHERE until > now()
"""

# A worker that listens reads the follows again when told (ADR-0105's amendment).
FOLLOW = """
WITH followed AS (
    INSERT INTO stream_followers (task_id, until)
    VALUES (%(task)s, now() + make_interval(secs => %(seconds)s))
    ON CONFLICT (task_id) DO UPDATE SET until = EXCLUDED.until
)
SELECT pg_notify('noeta_stream_follows', '')
"""
LISTEN_FOR_FOLLOWS = "LISTEN noeta_stream_follows"

# The task's status and last seq with its rows past the cursor, by the primary key: one
# round trip a read, and a reader learns from it when the task moved on or finished.
READ_CHUNKS = """
SELECT t.status, t.last_seq,
       c.call_seq, c.attempt, c.seq, c.kind, c.block, c.char_offset, c.data, c.call_id
  FROM tasks AS t
  LEFT JOIN LATERAL (
      (SELECT s.call_seq, s.attempt, s.seq, s.kind, s.block, s.char_offset, s.data, s.call_id
         FROM stream_chunks AS s
        WHERE s.task_id = t.id AND s.call_seq > 0
          AND (s.call_seq, s.attempt, s.seq) > (%(call)s, %(attempt)s, %(seq)s)
        ORDER BY s.call_seq, s.attempt, s.seq
        LIMIT %(limit)s)
      UNION ALL  -- background jobs' output: their own lane, (0, epoch, n) (ADR-0114)
      (SELECT s.call_seq, s.attempt, s.seq, s.kind, s.block, s.char_offset, s.data, s.call_id
         FROM stream_chunks AS s
        WHERE s.task_id = t.id AND s.call_seq = 0
          AND (s.attempt, s.seq) > (%(job_epoch)s, %(job_seq)s)
        ORDER BY s.attempt, s.seq
        LIMIT %(limit)s)
  ) AS c ON true
 WHERE t.id = %(task)s
"""


def stream_channel(task_id: str) -> str:
    """The task's channel: short whatever the id (LISTEN truncates at 63 bytes), and not
    the id itself (a channel name is visible to every role)."""
    return "noeta_s_" + hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:16]


class PostgresReplyStreams(PostgresWakeups):
    """Writing, following and reading streamed replies."""

    async def followed(self, *, clearing: bool = False) -> Mapping[str, float]:
        if clearing:
            rows = await self._write_many(READ_FOLLOWED_CLEARING, {})
        else:
            rows = await self._read(READ_FOLLOWED, {})
        return {row[0]: row[1] for row in rows}

    async def write_chunks(self, task_id: str, chunks: Sequence[Chunk], *, first: bool) -> None:
        if not chunks:
            return
        start = chunks[0]
        params = {
            "task": task_id,
            "first": first,
            "call": start.call_seq,
            "attempt": start.attempt,
            "calls": [chunk.call_seq for chunk in chunks],
            "attempts": [chunk.attempt for chunk in chunks],
            "seqs": [chunk.seq for chunk in chunks],
            "kinds": [chunk.kind for chunk in chunks],
            "blocks": [chunk.block for chunk in chunks],
            "offsets": [chunk.char_offset for chunk in chunks],
            "texts": [chunk.data for chunk in chunks],
            "call_id": start.call_id,  # a flush is one call's rows
            "channel": stream_channel(task_id),
        }
        await self._write(WRITE_CHUNKS, params)

    async def remove_text(self, task_id: str, call_seq: int, call_id: str = "") -> None:
        await self._write(REMOVE_TEXT, {"task": task_id, "call": call_seq, "call_id": call_id})

    async def follow(self, task_id: str) -> None:
        await self._write(FOLLOW, {"task": task_id, "seconds": FOLLOW_SECONDS})

    async def read_chunks(self, task_id: str, after: Cursor, limit: int) -> ChunksRead:
        params = {
            "task": task_id,
            "call": after.call_seq,
            "attempt": after.attempt,
            "seq": after.seq,
            "job_epoch": after.job_epoch,
            "job_seq": after.job_seq,
            "limit": limit,
        }
        rows = await self._read(READ_CHUNKS, params)
        if not rows:
            return ChunksRead(None, 0, ())
        chunks = tuple(Chunk(*row[2:]) for row in rows if row[2] is not None)
        return ChunksRead(rows[0][0], rows[0][1], chunks)

    def follow_announcements(self) -> AsyncGenerator[str, None]:
        return self._listen(LISTEN_FOR_FOLLOWS, "noeta-stream-follows")

    def announcements(self, task_id: str) -> AsyncGenerator[str, None]:
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(stream_channel(task_id)))
        return self._listen(listen, "noeta-stream")

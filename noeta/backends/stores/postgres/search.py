"""The text search on PostgreSQL (ADR-0102): `task_search` filled in batches by walks of
the tasks by creation and by finish past two marks (by `noeta web` and the search, never
by a task's own statements), searched through its trigram index, plus the tasks past
the marks read directly, so a search is never wrong while the table catches up."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import datetime, timedelta
from typing import Any

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.task_search_rows import (
    SEARCH_CHARS,
    haystack,
    how_it_ended,
    needle,
)
from noeta.core.ports import payload
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import text_pattern

log = logging.getLogger("noeta.store")

CREATED_ROWS = 2000  # tasks a step of the walk by creation reads (their first events)
FINISHED_ROWS = 5000  # finishes a step of the walk by finish passes (most need no read)

# How far a walk may go: not past a moment a task still uncommitted may carry. A task's
# created_at and finished_at are stamped inside the transaction that writes them, so
# none uncommitted is older than the oldest open transaction's start (of this role's
# sessions: another role's start is hidden from it, which the settle covers).
CUTOFF = """cutoff AS (
  SELECT least(clock_timestamp() - %(settle)s::interval,
               (SELECT min(xact_start) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND backend_type = 'client backend')) AS at)"""


def _mark(walk: str, column: str) -> str:
    return f"(SELECT {column} FROM task_search_marks WHERE walk = '{walk}')"


# The searched texts of a batch: each walked task's id, creation, where the walk is,
# and, for a task whose text is wanted, the cut texts of its opening, call and end.
_TEXTS = """
SELECT c.at, b.id, b.created_at, b.walked_at, b.wanted, opening.size, opening.text,
       called.size, called.text, ending.size, ending.text, b.status
  FROM cutoff c LEFT JOIN batch b ON true
  LEFT JOIN LATERAL (SELECT length(e.data) AS size, left(e.data, %(chars)s) AS text
                       FROM events e WHERE b.wanted AND e.task_id = b.id AND e.seq = 1
                    ) AS opening ON true
  LEFT JOIN LATERAL (SELECT length(e.data) AS size, left(e.data, %(chars)s) AS text
                       FROM events e
                      WHERE b.wanted AND e.task_id = b.id AND e.seq IN (2, 3)
                        AND e.type = 'CallRequested'
                      ORDER BY e.seq LIMIT 1) AS called ON true
  LEFT JOIN LATERAL (SELECT length(e.data) AS size, left(e.data, %(chars)s) AS text
                       FROM events e
                      WHERE b.wanted AND b.status IN ('failed', 'cancelled')
                        AND e.task_id = b.id AND e.seq > b.last_seq - 3
                        AND e.type = 'TaskFinished'
                      ORDER BY e.seq DESC LIMIT 1) AS ending ON true
 ORDER BY b.walked_at, b.id"""

# The next tasks by creation (tasks_by_creation), each read whole.
CREATED_BATCH = f"""
WITH {CUTOFF},
batch AS (
  SELECT id, created_at, created_at AS walked_at, status, last_seq, true AS wanted
    FROM tasks
   WHERE (created_at, id) > ({_mark("created", "at")}, {_mark("created", "id")})
     AND created_at < (SELECT at FROM cutoff)
   ORDER BY created_at, id LIMIT %(rows)s)
{_TEXTS}"""

# The next finishes (tasks_finished): a failed or cancelled task is read again for its
# error; a done one only moves the walk on.
FINISHED_BATCH = f"""
WITH {CUTOFF},
batch AS (
  SELECT id, created_at, finished_at AS walked_at, status, last_seq,
         status IN ('failed', 'cancelled') AS wanted
    FROM tasks
   WHERE finished_at >= {_mark("finished", "at")}
     AND (finished_at, id) > ({_mark("finished", "at")}, {_mark("finished", "id")})
     AND finished_at < (SELECT at FROM cutoff)
   ORDER BY finished_at, id LIMIT %(rows)s)
{_TEXTS}"""

# A batch's rows and the walk's new mark, in one statement. Two writers of one task's row
# (two `noeta web`s) keep the longer text: a task's text only grows (its error comes at
# its end), unless the id was pruned and used again (a new creation). The first step of
# the walk by creation moves the walk by finish to its cutoff: every task finished
# before it is read with its error by the walk by creation.
STORE_BATCH = """
WITH stored AS (
  INSERT INTO task_search AS s (task_id, created_at, haystack, ended, error_kind, kind)
  SELECT * FROM unnest(%(ids)s::text[], %(ats)s::timestamptz[], %(texts)s::text[],
                       %(ended)s::text[], %(error_kinds)s::text[], %(kinds)s::text[])
  ON CONFLICT (task_id) DO UPDATE SET created_at = excluded.created_at,
                                      haystack = excluded.haystack,
                                      ended = excluded.ended,
                                      error_kind = excluded.error_kind,
                                      kind = excluded.kind
   WHERE length(excluded.haystack) >= length(s.haystack)
      OR excluded.created_at <> s.created_at
  RETURNING 1),
finished AS (
  UPDATE task_search_marks SET at = %(cutoff)s
   WHERE walk = 'finished' AND at = '-infinity' AND %(walk)s = 'created'
  RETURNING 1)
UPDATE task_search_marks SET at = %(at)s, id = %(id)s
 WHERE walk = %(walk)s AND (at, id) < (%(at)s, %(id)s)"""

# A mark not moved yet is -infinity, which no Python datetime holds: no task is older
# than 1970.
SEARCH_MARKS = "SELECT walk, greatest(at, 'epoch'), id FROM task_search_marks"
HAS_TRIGRAMS = "SELECT to_regclass('task_search_trigrams') IS NOT NULL"

# A task's stored text matched directly: a part of its id, of its prompt (its first
# event), of a job's function name (its call), of a failed or cancelled task's error
# (its TaskFinished). Texts are matched in the log's own escaped JSON text, never
# decoded: PostgreSQL refuses to decode a \u0000 or a lone surrogate, and one such row
# would fail every search. The plain substring test first: the regular expression runs
# only where it may match.
_ERROR_DIRECTLY = """EXISTS (
        SELECT 1 FROM events
         WHERE tasks.status IN ('failed', 'cancelled') AND events.task_id = tasks.id
           AND events.seq > tasks.last_seq - 3 AND events.type = 'TaskFinished'
           AND events.data ILIKE %(encoded_pattern)s AND events.data ~* %(error_text_regex)s)"""
_MATCHING_DIRECTLY = f"""(id ILIKE %(pattern)s OR EXISTS (
        SELECT 1 FROM events
         WHERE events.task_id = tasks.id AND events.seq = 1
           AND events.data ILIKE %(encoded_pattern)s AND events.data ~* %(prompt_regex)s)
        OR EXISTS (
        SELECT 1 FROM events
         WHERE events.task_id = tasks.id AND events.seq IN (2, 3)
           AND events.type = 'CallRequested'
           AND events.data ILIKE %(encoded_pattern)s AND events.data ~* %(name_regex)s)
        OR {_ERROR_DIRECTLY})"""


# The newest failed (or cancelled) rows of task_search a search of that status walks
# before it asks the trigram index (matching_ids).
ENDED_WALK = 2000


def matching_ids(selected: str, *, ended: bool = False) -> str:
    """The ids of the tasks matching %(needle)s under `selected` (a filter on `tasks`),
    newest first before the cursor, up to %(limit)s of each part (NULL: all): those in
    task_search; those created past its mark; those finished past the other, for their
    error. The parts overlap; the caller's `id IN` takes each task once. The marks are
    parameters (`SEARCH_MARKS`, read first), not subqueries: the planner sees how few
    tasks are past them and walks tasks_by_creation and tasks_finished, not a status's
    every task.

    `ended`: the filter's statuses (%(ended)s) are failed or cancelled ones only: the
    rows of task_search that say so are read alone (ADR-0112). Of one status
    (%(ended_one)s), its newest %(ended_walk)s rows (ENDED_WALK) are walked first
    (task_search_ended, newest first): a text many of them hold fills the page there,
    and the trigram index is not read at all (a one-time filter). The planner believes
    few rows match a text, and the index reads every match before the newest are taken
    (10,000 heap rows for a text 10,000 failures hold). A task that ended past the walk
    by finish's mark has no such row yet: the third part matches it whole."""
    before = "(%(before_at)s, %(before_id)s)"
    rows = "ended = ANY (%(ended)s) AND" if ended else ""
    ended_since = _MATCHING_DIRECTLY if ended else _ERROR_DIRECTLY
    indexed = f"""
  (SELECT s.task_id
     FROM (SELECT task_id, created_at AS indexed_at FROM task_search
            WHERE {rows} haystack LIKE %(needle)s) AS s
     JOIN tasks ON tasks.id = s.task_id
    WHERE (s.indexed_at, s.task_id) < {before} AND {selected}
    ORDER BY s.indexed_at DESC, s.task_id DESC LIMIT %(limit)s)"""
    if ended:
        indexed = f"""
  (WITH walked AS MATERIALIZED (
     SELECT s.task_id
       FROM (SELECT task_id, created_at AS indexed_at, haystack FROM task_search
              WHERE ended = %(ended_one)s AND (created_at, task_id) < {before}
              ORDER BY ended DESC, created_at DESC, task_id DESC
              LIMIT %(ended_walk)s) AS s
       JOIN tasks ON tasks.id = s.task_id
      WHERE s.haystack LIKE %(needle)s AND {selected}
      ORDER BY s.indexed_at DESC, s.task_id DESC LIMIT %(limit)s)
   SELECT task_id FROM walked WHERE (SELECT count(*) FROM walked) = %(limit)s
   UNION ALL
   SELECT task_id FROM {indexed} AS indexed
    WHERE (SELECT count(*) FROM walked) IS DISTINCT FROM %(limit)s)"""
    return f"""{indexed}
  UNION ALL
  (SELECT id FROM tasks
    WHERE (created_at, id) > (%(created_mark_at)s, %(created_mark_id)s)
      AND (created_at, id) < {before} AND {selected} AND {_MATCHING_DIRECTLY}
    ORDER BY created_at DESC, id DESC LIMIT %(limit)s)
  UNION ALL
  (SELECT id FROM tasks
    WHERE finished_at >= %(finished_mark_at)s AND status IN ('failed', 'cancelled')
      AND (created_at, id) < {before} AND {selected} AND {ended_since}
    ORDER BY created_at DESC, id DESC LIMIT %(limit)s)"""


# A field's opening, then whole characters of its escaped JSON text (a plain one, a
# \uXXXX escape, a two-character escape): a match starts on a character, never inside
# an escape, so "n" does not match the n of a "\n".
_FIELD_BODY = r'(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*'
_NAME_PREFIX = r'^\{"v":[0-9]+,"call_id":"(?:[^"\\]|\\.)*","name":"'


def _literal(text: str) -> str:
    """`text` (ASCII: stored JSON text) taken literally in a regular expression."""
    return re.sub(r"([^A-Za-z0-9])", r"\\\1", text)


def search_params(text: str) -> dict[str, Any]:
    """The parameters of `matching_ids` for `text`."""
    encoded = _literal(payload.encode(text)[1:-1])
    return {
        "needle": needle(text),
        "ended_walk": ENDED_WALK,
        "pattern": text_pattern(text),
        "encoded_pattern": text_pattern(payload.encode(text)[1:-1]),
        "prompt_regex": f'"prompt":"{_FIELD_BODY}{encoded}',
        "name_regex": f'{_NAME_PREFIX}[^"]*{encoded}',
        "error_text_regex": f'"error":"{_FIELD_BODY}{encoded}',
    }


class PostgresSearch(PostgresConnection):
    """The filling of `task_search` (the views' searches read it)."""

    search_settle = timedelta(seconds=5)  # the tests set 0: their tasks are committed
    _search_lock: asyncio.Lock | None = None
    _said_no_trigrams = False

    async def index_search(self) -> bool:
        if self._search_lock is None:
            self._search_lock = asyncio.Lock()
        async with self._search_lock:  # one walk at a time per store: the marks only grow
            created = await self._search_step("created", CREATED_BATCH, CREATED_ROWS)
            finished = await self._search_step("finished", FINISHED_BATCH, FINISHED_ROWS)
        if not self._said_no_trigrams:
            self._said_no_trigrams = True
            if not (await self._read(HAS_TRIGRAMS, {}))[0][0]:
                log.warning(
                    "text search: no pg_trgm on this server (or no right to create it), so "
                    "a search reads the whole task_search table: slower at a million tasks"
                )
        return created and finished

    async def search_marks(self) -> dict[str, Any]:
        """The parameters of `matching_ids` that say where the walks are."""
        marks = {walk: (at, last) for walk, at, last in await self._read(SEARCH_MARKS, {})}
        return {
            "created_mark_at": marks["created"][0],
            "created_mark_id": marks["created"][1],
            "finished_mark_at": marks["finished"][0],
        }

    async def _search_step(self, walk: str, query: str, rows: int) -> bool:
        """One batch of a walk stored; True when the walk has reached its cutoff."""
        params = {"settle": self.search_settle, "rows": rows, "chars": SEARCH_CHARS}
        read = await self._read(query, params)
        cutoff: datetime = read[0][0]
        texts = [row for row in read if row[4]]
        walked = [row for row in read if row[1] is not None]
        done = len(walked) < rows
        at, last = (cutoff, "") if done else (walked[-1][3], walked[-1][1])
        ends = [how_it_ended(TaskStatus(row[11]), *_cut_texts(row)[1:]) for row in texts]
        await self._write(
            STORE_BATCH,
            {
                "ids": [row[1] for row in texts],
                "ats": [row[2] for row in texts],
                "texts": [haystack(row[1], *_cut_texts(row)) for row in texts],
                "ended": [end[0] for end in ends],
                "error_kinds": [end[1] for end in ends],
                "kinds": [end[2] for end in ends],
                "walk": walk,
                "at": at,
                "id": last,
                "cutoff": cutoff,
            },
        )
        return done


def _cut_texts(
    row: tuple[Any, ...],
) -> tuple[tuple[int, str] | None, tuple[int, str] | None, tuple[int, str] | None]:
    opening = None if row[6] is None else (row[5], row[6])
    call = None if row[8] is None else (row[7], row[8])
    ending = None if row[10] is None else (row[9], row[10])
    return opening, call, ending

"""The two layouts bench/append_rows.py compares: today's `events` (one row per event) and
the prototype `event_batches` of ADR-0089 (one row per append), with the same writes and
reads for each. Today's reads are the store's own statements, imported, not copied."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from noeta.backends.stores.postgres.logs import READ_LOG
from noeta.backends.stores.postgres.views import EVENT_TEXT, LOG_PAGE

# The prototype, created beside the migrated schema's tables (its tasks, its noeta_fence).
# One row per append: the events' types in order, and their ASCII JSON texts joined into
# one JSON array. Kept as text for the reason events.data is (jsonb refuses \u0000), and
# split with the `json` type, which keeps each element's text exactly as written.
# One index: (task_id, last_seq) finds the row holding any seq (the first whose last_seq
# is at or after it), every row after a seq, and a task's rows to prune.
CREATE_EVENT_BATCHES = """
CREATE TABLE event_batches (
    task_id    text NOT NULL REFERENCES tasks (id),
    first_seq  bigint NOT NULL,
    last_seq   bigint NOT NULL,
    types      text[] NOT NULL,
    data       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    epoch      bigint NOT NULL DEFAULT 0,
    owner      text,
    PRIMARY KEY (task_id, last_seq),
    CHECK (cardinality(types) = last_seq - first_seq + 1)
)
"""

# noeta_append_and_continue and noeta_append_and_finish (queue/postgres/functions/), the
# INSERT alone changed: one row for the append's events. The client sends the types and
# the events' texts already joined into the JSON array (it encodes each event anyway), so
# the server parses nothing: the best case for this layout.
_INSERT_BATCH_OWNED_BY = """
    IF cardinality(p_types) > 0 THEN
        INSERT INTO event_batches (task_id, first_seq, last_seq, types, data, epoch, owner)
            VALUES (p_task, p_expected_seq + 1, p_expected_seq + cardinality(p_types),
                    p_types, p_data, p_epoch, {owner});
    END IF;"""
_INSERT_BATCH = _INSERT_BATCH_OWNED_BY.format(owner="(SELECT owner FROM tasks WHERE id = p_task)")

CREATE_BATCH_APPENDS = f"""
CREATE FUNCTION batch_append_and_continue(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_types text[], p_data text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + coalesce(cardinality(p_types), 0);
BEGIN{_INSERT_BATCH}
    UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now
     WHERE id = p_task;
    RETURN v_seq;
END $$;

CREATE FUNCTION batch_append_and_finish(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_types text[], p_data text,
    p_status text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + coalesce(cardinality(p_types), 0);
BEGIN
    IF p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'batch_append_and_finish: % is not a finished status', p_status;
    END IF;{_INSERT_BATCH}
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now
     WHERE id = p_task;
    PERFORM pg_notify('noeta_finished', p_task);
    RETURN v_seq;
END $$;
"""

# A task created already claimed (epoch 1, this bench's owner) with its first events, as
# noeta_create_task writes them (epoch 0, no owner), so that the appends that follow pass
# the fence. The claim itself is the same statement for both layouts: left out.
_CREATE_CLAIMED = """
CREATE FUNCTION rows_create_task({events}) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    p_epoch bigint := 0;
    p_expected_seq bigint := 0;
    v_seq bigint := {count};
BEGIN
    INSERT INTO tasks (id, queue, status, owner, owner_epoch, lease_until, claimable_at,
                       last_seq)
        SELECT p_task, 'rows', 'running', 'bench', 1, lease.until, lease.until, v_seq
          FROM (SELECT clock_timestamp() + interval '1 hour' AS until) AS lease;
{insert}
    RETURN v_seq;
END $$;
"""
_INSERT_EVENTS = """
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_task, e.ord, e.pair->>0, e.pair->>1
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);"""

CREATE_EVENTS_CREATE = _CREATE_CLAIMED.format(
    events="p_task text, p_events jsonb",
    count="jsonb_array_length(p_events)",
    insert=_INSERT_EVENTS,
)
CREATE_BATCHES_CREATE = _CREATE_CLAIMED.format(
    events="p_task text, p_types text[], p_data text",
    count="cardinality(p_types)",
    insert=_INSERT_BATCH_OWNED_BY.format(owner="NULL"),
)

# A batch row's events as today's rows: (task_id, seq, type, data, created_at, epoch, owner)
# from every row holding a seq after %(after)s, in seq order (the index's, then the array's).
_BATCHED_EVENTS = """
SELECT b.task_id, b.first_seq + e.ord - 1 AS seq, b.types[e.ord] AS type,
       e.data::text AS data, b.created_at, b.epoch, b.owner
  FROM event_batches AS b
 CROSS JOIN LATERAL json_array_elements(b.data::json) WITH ORDINALITY AS e(data, ord)
 WHERE b.task_id = %(task)s AND b.last_seq > %(after)s AND b.first_seq + e.ord - 1 > %(after)s
 ORDER BY b.last_seq, e.ord
"""

# The web view's page of a log (LOG_PAGE) over the batched rows.
_BATCHED_LOG_PAGE = f"""
SELECT seq, type, created_at, epoch, owner, length(data),
       CASE WHEN length(data) <= %(inline)s THEN data END, left(data, %(preview)s)
  FROM ({_BATCHED_EVENTS} LIMIT %(limit)s) AS page
"""

# One event's text by seq (EVENT_TEXT): the one row whose range holds it.
_BATCHED_EVENT_TEXT = """
SELECT substr(one.data, %(start)s, %(length)s), length(one.data)
  FROM (SELECT (b.data::json -> (%(seq)s - b.first_seq)::int)::text AS data
          FROM event_batches AS b
         WHERE b.task_id = %(task)s AND b.last_seq >= %(seq)s AND b.first_seq <= %(seq)s
         ORDER BY b.last_seq LIMIT 1) AS one
"""


Events = Sequence[tuple[str, str]]  # an append's events: type, ASCII JSON text


def as_json_pairs(events: Events) -> dict[str, Any]:
    """The lean appends' one jsonb parameter, as the store sends it."""
    return {"events": json.dumps([list(pair) for pair in events])}


def as_batch(events: Events) -> dict[str, Any]:
    """The types, and the texts joined into one JSON array, as a batching client would."""
    return {
        "types": [kind for kind, _ in events],
        "data": "[" + ",".join(data for _, data in events) + "]",
    }


@dataclass(frozen=True)
class Layout:
    """One way of storing a log: its table, how an append writes it, how readers read it."""

    name: str
    table: str
    encode: Callable[[Events], dict[str, Any]]  # an append's events as its parameters
    create: str  # %(task)s and the encoded events
    append_and_continue: str  # %(task)s, %(seq)s and the encoded events
    append_and_finish: str
    read_log: str  # %(task)s, %(after)s
    log_page: str  # %(task)s, %(after)s, %(limit)s, %(inline)s, %(preview)s
    event_text: str  # %(task)s, %(seq)s, %(start)s, %(length)s
    row_events: str  # events per row, summed: the events a table holds

    @property
    def prune(self) -> str:
        return f"DELETE FROM {self.table} WHERE task_id = ANY (%(ids)s)"


_JSONB = "%(events)s::jsonb"
_BATCH = "%(types)s::text[], %(data)s"
EVENTS = Layout(
    "events",
    "events",
    as_json_pairs,
    f"SELECT rows_create_task(%(task)s, {_JSONB})",
    f"SELECT noeta_append_and_continue(%(task)s, 1, %(seq)s, {_JSONB})",
    f"SELECT noeta_append_and_finish(%(task)s, 1, %(seq)s, {_JSONB}, 'done')",
    READ_LOG,
    LOG_PAGE,
    EVENT_TEXT,
    "1",
)
BATCHES = Layout(
    "event_batches",
    "event_batches",
    as_batch,
    f"SELECT rows_create_task(%(task)s, {_BATCH})",
    f"SELECT batch_append_and_continue(%(task)s, 1, %(seq)s, {_BATCH})",
    f"SELECT batch_append_and_finish(%(task)s, 1, %(seq)s, {_BATCH}, 'done')",
    _BATCHED_EVENTS,
    _BATCHED_LOG_PAGE,
    _BATCHED_EVENT_TEXT,
    "last_seq - first_seq + 1",
)
LAYOUTS = (EVENTS, BATCHES)

# What a layout needs beyond a migrated schema.
SETUP = {
    "events": [CREATE_EVENTS_CREATE],
    "event_batches": [CREATE_EVENT_BATCHES, CREATE_BATCH_APPENDS, CREATE_BATCHES_CREATE],
}

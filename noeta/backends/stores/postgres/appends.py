"""Creating tasks and the fenced append on PostgreSQL: the statements call the functions
in `queue/postgres/functions/` (`noeta_fence`, `noeta_append`…), which hold the checks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.group_commit import LeanAppend
from noeta.backends.stores.postgres.inbox import dedupe_key
from noeta.core.ports import payload
from noeta.core.ports.store import (
    Claim,
    Continue,
    Delivery,
    Finish,
    NewEvent,
    NewTask,
    NextState,
    Wait,
    WaitHolding,
    check_append,
    check_key,
    check_lease,
    check_moment,
)

CREATE_TASK = """
SELECT noeta_create_task(%(id)s, %(queue)s, %(ready_at)s, %(types)s::text[], %(data)s::text[],
                         %(key)s, %(priority)s)
"""

APPEND_EVENTS = """
SELECT noeta_append(
    %(task)s, %(epoch)s, %(expected_seq)s, %(types)s::text[], %(data)s::text[],
    %(take)s::bigint[], %(next)s, %(until)s, %(wake_prefix)s,
    %(new_ids)s::text[], %(new_queues)s::text[], %(new_ready)s::timestamptz[],
    %(new_counts)s::int[], %(new_types)s::text[], %(new_data)s::text[],
    %(deliver_tasks)s::text[], %(deliver_keys)s::text[], %(deliver_payloads)s::text[])
"""

# An append that finishes its task also tells clients waiting on it (`result`), on
# channel noeta_finished with the task id as payload, if one waits (ADR-0087). In the
# append's own statement: at its commit, never for a refused append, no extra round trip.
APPEND_EVENTS_ANNOUNCING_FINISH = f"""
SELECT appended.seq, noeta_announce_finish(%(task)s)
  FROM ({APPEND_EVENTS}) AS appended(seq)
"""

# An append whose worker claims next the task it makes claimable (`continued`, ADR-0117)
# names it in the transaction's noeta.continues first (the CTE is read before the append
# runs): the wake-up triggers call no idle worker for it.
CONTINUING = (
    "WITH continuing AS MATERIALIZED (SELECT set_config('noeta.continues', %(continues)s, true))"
)
APPEND_EVENTS_CONTINUING = f"{CONTINUING} {APPEND_EVENTS.strip()} FROM continuing"
APPEND_EVENTS_CONTINUING_FINISHING = f"""{CONTINUING}
SELECT appended.seq, noeta_announce_finish(%(task)s)
  FROM ({APPEND_EVENTS.strip()} FROM continuing) AS appended(seq)
"""
# An append that creates a task started by its worker (`NewTask.started`, ADR-0117): the
# task is claimed and its start written by noeta_start_created, run once the append has
# (its subquery is read first), in the same statement and commit.
APPEND_EVENTS_STARTING = f"""{CONTINUING}
SELECT appended.seq, noeta_start_created(
    %(start_task)s, %(start_worker)s, %(start_lease)s, %(start_types)s::text[],
    %(start_data)s::text[], %(start_needs)s::text[])
  FROM ({APPEND_EVENTS.strip()} FROM continuing OFFSET 0) AS appended(seq)
"""

# The common cases have lean functions (0009): events only, keep running; and a finish
# with nothing to take, deliver or create. Their events are one jsonb parameter.
APPEND_EVENTS_ONLY = """
SELECT noeta_append_and_continue(%(task)s, %(epoch)s, %(expected_seq)s, %(events)s::jsonb)
"""
APPEND_FINISHING = """
SELECT noeta_append_and_finish(%(task)s, %(epoch)s, %(expected_seq)s, %(events)s::jsonb,
                               %(status)s)
"""

# [[type, data], ...], data the event's encoded JSON text as a JSON string: encoded in one
# call. The encoded text is ASCII already; only its quotes and backslashes are escaped.
_EVENT_PAIRS = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


class PostgresAppends(PostgresConnection):
    """Task creation and the append, whose epoch, lease and sequence checks are the fence."""

    async def create_task(self, task: NewTask) -> bool:
        row = await self._write(CREATE_TASK, create_params(task))
        return bool(row and row[0])

    async def append(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
    ) -> int:
        check_append(events, take)
        if not (take or deliveries or new_tasks) and isinstance(next_state, Continue | Finish):
            status = next_state.status.value if isinstance(next_state, Finish) else None
            lean = LeanAppend(claim.task_id, claim.epoch, expected_seq, events_json(events), status)
            return await self._group_commit.append(lean, lambda: self._append_alone(lean))
        statement, params = append_statement(
            claim, expected_seq, events, take, deliveries, new_tasks, next_state
        )
        row = await self._write(statement, params, task_id=claim.task_id)
        assert row is not None
        last_seq: int = row[0]
        return last_seq

    async def _append_alone(self, lean: LeanAppend) -> int:
        """A lean append in its own statement, as it goes when no other is in flight."""
        params = {
            "task": lean.task_id,
            "epoch": lean.epoch,
            "expected_seq": lean.expected_seq,
            "events": lean.events,
            "status": lean.status,
        }
        statement = APPEND_EVENTS_ONLY if lean.status is None else APPEND_FINISHING
        row = await self._write(statement, params, task_id=lean.task_id)
        assert row is not None
        appended: int = row[0]
        return appended


def append_statement(
    claim: Claim,
    expected_seq: int,
    events: Sequence[NewEvent],
    take: Sequence[int],
    deliveries: Sequence[Delivery],
    new_tasks: Sequence[NewTask],
    next_state: NextState,
) -> tuple[str, dict[str, Any]]:
    """The statement (and its parameters) of an append that is not lean: `noeta_append`,
    with what its next state and its continued or started tasks add to it."""
    types, data = _encode_events(events)
    new_types: list[str] = []
    new_data: list[str] = []
    for task in new_tasks:
        task_types, task_data = encode_task(task)
        new_types += task_types
        new_data += task_data
    # Lock order: the appending task's row first (inside the function), then the
    # rows it delivers to, in id order.
    ordered = sorted(deliveries, key=lambda delivery: delivery.task_id)
    next_name, until = _next_state(next_state)
    params: dict[str, Any] = {
        "task": claim.task_id,
        "epoch": claim.epoch,
        "expected_seq": expected_seq,
        "types": types,
        "data": data,
        "take": list(take),
        "next": next_name,
        "wake_prefix": next_state.wake_on_prefix if isinstance(next_state, Wait) else None,
        "until": until,
        "new_ids": [t.id for t in new_tasks],
        "new_queues": [t.queue for t in new_tasks],
        "new_ready": [t.ready_at for t in new_tasks],
        "new_counts": [len(t.events) for t in new_tasks],
        "new_types": new_types,
        "new_data": new_data,
        "deliver_tasks": [d.task_id for d in ordered],
        "deliver_keys": [dedupe_key(d) for d in ordered],
        "deliver_payloads": [payload.encode(d.payload) for d in ordered],
    }
    finishing = isinstance(next_state, Finish)
    statement = APPEND_EVENTS_ANNOUNCING_FINISH if finishing else APPEND_EVENTS
    continued = [d.task_id for d in deliveries if d.continued]
    continued += [t.id for t in new_tasks if t.continued]
    if continued:
        params["continues"] = continued[0]
        statement = APPEND_EVENTS_CONTINUING_FINISHING if finishing else APPEND_EVENTS_CONTINUING
    started = next((task for task in new_tasks if task.started is not None), None)
    if started is not None and started.started is not None and not finishing:
        start = started.started
        start_types, start_data = _encode_events(start.events)
        params |= {
            "continues": params.get("continues", started.id),
            "start_task": started.id,
            "start_worker": check_key("worker name", start.worker),
            "start_lease": check_lease(start.lease_seconds),
            "start_types": start_types,
            "start_data": start_data,
            "start_needs": None if start.needs is None else list(start.needs),
        }
        statement = APPEND_EVENTS_STARTING
    return statement, params


def create_params(task: NewTask) -> dict[str, object]:
    """The parameters of `noeta_create_task` (and its unique twin) for `task`, checked."""
    types, data = encode_task(task)
    return {
        "id": task.id,
        "queue": task.queue,
        "ready_at": task.ready_at,
        "types": types,
        "data": data,
        "key": task.concurrency_key,
        "priority": task.priority,
    }


def encode_task(task: NewTask) -> tuple[list[str], list[str]]:
    """A new task's checked inputs and its events as the parallel type and data arrays."""
    check_task(task)
    return _encode_events(task.events)


def check_task(task: NewTask) -> None:
    """A new task's id, start and queue, checked before anything is sent."""
    check_key("task id", task.id)
    check_moment(task.ready_at)
    check_key("queue name", task.queue)


def encode_event(event: NewEvent) -> tuple[str, str]:
    """An event's checked type and its encoded data."""
    return check_key("event type", event.type), payload.encode(event.data)


def events_json(events: Sequence[NewEvent]) -> str:
    """Events as the jsonb parameter of the lean appends, checked as `_encode_events` does."""
    pairs = [[check_key("event type", event.type), payload.encode(event.data)] for event in events]
    return _EVENT_PAIRS.encode(pairs)


def _encode_events(events: Sequence[NewEvent]) -> tuple[list[str], list[str]]:
    types = [check_key("event type", event.type) for event in events]
    return types, [payload.encode(event.data) for event in events]


def _next_state(state: NextState) -> tuple[str, datetime | None]:
    match state:
        case Continue():
            return "continue", None
        case Wait(until=until):
            return "wait", check_moment(until)
        case WaitHolding():
            return "wait_holding", None
        case Finish(status=status):
            return status.value, None

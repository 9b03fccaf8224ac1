"""Creating tasks and the fenced append on sqlite: the checks and writes mirror
the functions in `queue/postgres/functions/` step for step, under the write lock."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import (
    EncodedTask,
    encode_delivery,
    encode_events,
    encode_task,
    from_micros,
    next_state_values,
)
from noeta.backends.stores.sqlite.inbox import insert_delivery
from noeta.core.errors import Conflict, NotStarted, UnknownTask
from noeta.core.ports.payload import encode
from noeta.core.ports.store import (
    Claim,
    Continue,
    Delivery,
    NewEvent,
    NewTask,
    NextState,
    StartedBy,
    Wait,
    check_append,
    check_key,
    check_lease,
)

_CONTINUE = Continue()

# What a task needs (0022, ADR-0092): the names its latest pin (:pin, the data of its last
# PluginsPinned event) names, sorted, each once, as a JSON array; NULL: any worker. The
# create and the append write it with the row they insert or update (0025: no trigger).
NEEDS_OF_PIN = """(
    SELECT CASE WHEN count(*) = 0 THEN NULL ELSE json_group_array(name) END
      FROM (SELECT DISTINCT json_extract(pin.value, '$[0]') AS name
              FROM json_each(:pin, '$.pins') AS pin ORDER BY 1))"""
# An append that pins nothing (:pin NULL) leaves what the task needs.
PINNED_NEEDS = f"needs = CASE WHEN :pin IS NULL THEN needs ELSE {NEEDS_OF_PIN} END"
INSERT_TASK = f"""
INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq, created_at, updated_at,
                   concurrency_key, priority, needs)
VALUES (:id, :queue, 'ready', :ready_at, :claimable_at, :last_seq, :now, :now, :key,
        :priority, {NEEDS_OF_PIN})
ON CONFLICT (id) DO NOTHING"""
INSERT_EVENT = "INSERT INTO events (task_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)"
# An appended event records the claim it was fenced at: its epoch, the row's owner.
INSERT_CLAIMED_EVENT = """
INSERT INTO events (task_id, seq, type, data, created_at, epoch, owner)
VALUES (?, ?, ?, ?, ?, ?, ?)"""
TASK_KEY_AND_PRIORITY = "SELECT concurrency_key, priority FROM tasks WHERE id = ?"
LOCK_TASK_FOR_APPEND = (
    "SELECT owner_epoch, status, lease_until, last_seq, owner FROM tasks WHERE id = ?"
)
TAKE_INBOX_ENTRIES = """
UPDATE inbox SET taken_seq = ?
 WHERE id IN (SELECT value FROM json_each(?)) AND task_id = ? AND taken_seq IS NULL"""
# From holding too: the wait is over, the task runs again under the same claim.
CONTINUE_TASK = f"""
UPDATE tasks SET last_seq = :seq, status = 'running', updated_at = :now, {PINNED_NEEDS}
 WHERE id = :task_id"""
HOLD_TASK = f"""
UPDATE tasks SET last_seq = :seq, status = 'holding', updated_at = :now, {PINNED_NEEDS}
 WHERE id = :task_id"""
# A delivery that arrived while the task ran must not be slept through.
WAIT_TASK = f"""
UPDATE tasks SET last_seq = :seq, status = 'waiting', lease_until = NULL, ready_at = :until,
       wake_prefix = :prefix,
       claimable_at = CASE
           WHEN EXISTS (SELECT 1 FROM inbox WHERE task_id = :task_id AND taken_seq IS NULL
                          AND (:prefix IS NULL OR
                               substr(coalesce(dedupe_key, ''), 1, length(:prefix)) = :prefix
                               OR dedupe_key = 'cancel'))
           THEN :now ELSE :until END,
       updated_at = :now, {PINNED_NEEDS}
 WHERE id = :task_id"""
FINISH_TASK = f"""
UPDATE tasks SET last_seq = :seq, status = :status, lease_until = NULL, ready_at = NULL,
       claimable_at = NULL, updated_at = :now, {PINNED_NEEDS}
 WHERE id = :task_id"""


class SqliteAppends(SqliteConnection):
    """Task creation and the append, whose epoch, lease and sequence checks are the fence."""

    async def create_task(self, task: NewTask) -> bool:
        encoded = encode_task(task)
        return await self._run(self._write, lambda c, now: insert_task(c, encoded, now))

    async def append(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = _CONTINUE,
    ) -> int:
        # Encode everything first: a bad payload raises PayloadError before any write.
        check_append(events, take)
        encoded_events = encode_events(events)
        take_list = encode([int(entry) for entry in take])
        # Sorted by task id like the PostgreSQL client does (there, for lock order), so
        # that which duplicate wins and which unknown task is reported are the same.
        encoded_deliveries = sorted(map(encode_delivery, deliveries), key=lambda d: d.task_id)
        encoded_tasks = [encode_task(task) for task in new_tasks]
        starts = [encode_start(task) for task in new_tasks if task.started is not None]
        next_kind, until = next_state_values(next_state)
        task_id = claim.task_id
        pin = latest_pin(encoded_events)

        def append_fenced(connection: sqlite3.Connection, now: int) -> int:
            owner = check_fence(connection, claim, expected_seq, now)
            seq = insert_claimed_events(connection, claim, expected_seq, encoded_events, now, owner)
            if take:
                taken = connection.execute(TAKE_INBOX_ENTRIES, (seq, take_list, task_id)).rowcount
                if taken != len(take):
                    raise Conflict(
                        task_id, "an inbox entry to take is already taken or not this task's"
                    )
            if encoded_tasks:  # subtasks: the parent's key and priority (its limits)
                key, priority = connection.execute(TASK_KEY_AND_PRIORITY, (task_id,)).fetchone()
                for new_task in encoded_tasks:
                    inherited = replace(new_task, concurrency_key=key, priority=priority)
                    insert_task(connection, inherited, now)
                for started in starts:
                    start_created(connection, started, now)
            for delivery in encoded_deliveries:
                insert_delivery(connection, delivery, now)
            values = {"seq": seq, "now": now, "task_id": task_id, "pin": pin}
            if next_kind == "continue":
                connection.execute(CONTINUE_TASK, values)
            elif next_kind == "wait_holding":
                connection.execute(HOLD_TASK, values)
            elif next_kind == "wait":
                assert isinstance(next_state, Wait)
                prefix = next_state.wake_on_prefix
                connection.execute(WAIT_TASK, {**values, "until": until, "prefix": prefix})
            else:
                connection.execute(FINISH_TASK, {**values, "status": next_kind})
            return seq

        return await self._run(self._write, append_fenced)


def check_fence(connection: sqlite3.Connection, claim: Claim, expected_seq: int, now: int) -> str:
    """The fence (PostgreSQL's noeta_fence): the claim's epoch is the task's, its lease is
    valid and the log ends at `expected_seq`; else Conflict. Returns the row's owner."""
    task_id = claim.task_id
    row = connection.execute(LOCK_TASK_FOR_APPEND, (task_id,)).fetchone()
    if row is None:
        raise UnknownTask(task_id)
    epoch, status, lease_until, last_seq, owner = row
    if epoch != claim.epoch:
        raise Conflict(
            task_id, f"claimed again since (epoch {epoch}, this claim has {claim.epoch})"
        )
    if status not in ("running", "holding"):
        raise Conflict(task_id, f"not held by this claim (status {status})")
    if lease_until <= now:
        raise Conflict(task_id, "the lease has expired")
    if last_seq != expected_seq:
        raise Conflict(task_id, f"the log ends at seq {last_seq}, not {expected_seq}")
    owner_name: str = owner
    return owner_name


def insert_claimed_events(
    connection: sqlite3.Connection,
    claim: Claim,
    expected_seq: int,
    events: Sequence[tuple[str, str]],
    now: int,
    owner: str,
) -> int:
    """Insert a fenced append's events; returns the new last seq."""
    connection.executemany(
        INSERT_CLAIMED_EVENT,
        [
            (claim.task_id, expected_seq + number, event_type, data, now, claim.epoch, owner)
            for number, (event_type, data) in enumerate(events, start=1)
        ],
    )
    return expected_seq + len(events)


# A task created claimed and started by the appending worker (ADR-0117), as
# noeta_start_created does on PostgreSQL: not in a queue with settings.
START_CREATED = f"""
UPDATE tasks SET status = 'running', owner = :worker, owner_epoch = 1, lease_until = :until,
       claimable_at = :until, updated_at = :now, last_seq = last_seq + :count,
       {PINNED_NEEDS}
 WHERE id = :task_id AND status = 'ready' AND owner_epoch = 0
   AND NOT EXISTS (SELECT 1 FROM queue_settings AS s WHERE s.queue = tasks.queue)"""


def encode_start(task: NewTask) -> tuple[str, StartedBy, list[tuple[str, str]]]:
    assert task.started is not None
    check_key("worker name", task.started.worker)
    check_lease(task.started.lease_seconds)
    return task.id, task.started, encode_events(task.started.events)


def start_created(
    connection: sqlite3.Connection,
    start: tuple[str, StartedBy, list[tuple[str, str]]],
    now: int,
) -> None:
    """Claim a task this append created for its worker, at epoch 1, and write its start."""
    task_id, started, events = start
    until = now + int(started.lease_seconds * 1_000_000)
    values = {
        "worker": started.worker,
        "until": until,
        "now": now,
        "count": len(events),
        "pin": latest_pin(events),
        "task_id": task_id,
    }
    if connection.execute(START_CREATED, values).rowcount != 1:
        raise NotStarted(f"task {task_id} cannot be created started: its queue has settings")
    claim = Claim(task_id, started.worker, 1, from_micros(until))
    seq = connection.execute("SELECT last_seq FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]
    insert_claimed_events(connection, claim, seq - len(events), events, now, started.worker)


def insert_task(connection: sqlite3.Connection, task: EncodedTask, now: int) -> bool:
    """Insert a task and its first events; False if a task with its id exists."""
    values = {
        "id": task.id,
        "queue": task.queue,
        "ready_at": task.ready_at,
        "claimable_at": now if task.ready_at is None else task.ready_at,
        "last_seq": len(task.events),
        "now": now,
        "key": task.concurrency_key,
        "priority": task.priority,
        "pin": latest_pin(task.events),
    }
    if connection.execute(INSERT_TASK, values).rowcount == 0:
        return False  # creation is idempotent by id
    connection.executemany(
        INSERT_EVENT,
        [
            (task.id, seq, event_type, data, now)
            for seq, (event_type, data) in enumerate(task.events, start=1)
        ],
    )
    return True


def latest_pin(events: Sequence[tuple[str, str]]) -> str | None:
    """The data of the last PluginsPinned of these encoded events: what the task needs
    from now on (NEEDS_OF_PIN); None: they pin nothing."""
    pins = (data for event_type, data in reversed(events) if event_type == "PluginsPinned")
    return next(pins, None)

"""The sqlite task store: one file that several processes on one machine can share.

Every write is one BEGIN IMMEDIATE transaction with its checks inside; the checks and
writes mirror `queue/postgres/0005_create_store_functions.sql` step for step.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from noeta.backends.stores.migrations import Migration, load_migrations, pending, require_current
from noeta.core.errors import (
    CommitUnknown,
    ConfigError,
    Conflict,
    PayloadError,
    StoreError,
    StoreUnavailable,
    UnknownTask,
)
from noeta.core.payload import decode, encode
from noeta.core.store import (
    CANCEL_KEY,
    Claim,
    Continue,
    CronFire,
    CronFireRecord,
    Delivery,
    Finish,
    FireOutcome,
    InboxEntry,
    LoadedTask,
    NewEvent,
    NewTask,
    NextState,
    Snapshot,
    StoredEvent,
    TaskRecord,
    TaskStatus,
    Wait,
    WaitHolding,
    check_append,
    check_cron_fire,
    check_key,
    check_lease,
    check_moment,
)

__all__ = ["SqliteStore"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

# Times are INTEGER microseconds since the Unix epoch (see queue/sqlite/0001): exact for
# every datetime, and they sort as the times do.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MINIMUM_SQLITE = (3, 24, 0)  # ON CONFLICT ... DO NOTHING / DO UPDATE
_CONTINUE = Continue()

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS noeta_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
)"""
SELECT_APPLIED_MIGRATIONS = "SELECT version, name FROM noeta_migrations"
FIND_MIGRATIONS_TABLE = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'noeta_migrations'"
)
RECORD_MIGRATION = "INSERT INTO noeta_migrations (version, name, applied_at) VALUES (?, ?, ?)"

INSERT_TASK = """
INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq, created_at, updated_at)
VALUES (?, ?, 'ready', ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING"""
INSERT_EVENT = "INSERT INTO events (task_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)"
LOCK_TASK_FOR_APPEND = "SELECT owner_epoch, status, lease_until, last_seq FROM tasks WHERE id = ?"
SELECT_TASK_STATUS = "SELECT status, wake_prefix FROM tasks WHERE id = ?"
# The queue list is bound as one JSON array, so the query stays one constant. The
# claimable_at range and order are served by the partial index tasks_claimable.
FIND_NEXT_CLAIMABLE = """
SELECT id, owner_epoch, status IN ('running', 'holding') FROM tasks
 WHERE claimable_at IS NOT NULL AND claimable_at <= ?
   AND queue IN (SELECT value FROM json_each(?))
 ORDER BY claimable_at
 LIMIT 1"""
FIND_NEXT_DUE = """
SELECT claimable_at FROM tasks
 WHERE claimable_at > ? AND queue IN (SELECT value FROM json_each(?))
 ORDER BY claimable_at LIMIT 1"""
COUNT_CLAIMABLE = """
SELECT queue, count(*) FROM tasks
 WHERE claimable_at <= ? AND queue IN (SELECT value FROM json_each(?))
 GROUP BY queue"""
FIND_THIS_TASK_IF_CLAIMABLE = """
SELECT id, owner_epoch FROM tasks
 WHERE id = ? AND claimable_at IS NOT NULL AND claimable_at <= ?"""
CLAIM_TASK = """
UPDATE tasks SET status = 'running', owner = ?, owner_epoch = owner_epoch + 1,
       lease_until = ?, claimable_at = ?, updated_at = ?
 WHERE id = ?"""
RENEW_CLAIM = """
UPDATE tasks SET lease_until = ?, claimable_at = ?, updated_at = ?
 WHERE id = ? AND owner_epoch = ? AND status IN ('running', 'holding')"""
RELEASE_CLAIM = """
UPDATE tasks SET status = 'ready', lease_until = NULL, ready_at = NULL, claimable_at = ?,
       updated_at = ?
 WHERE id = ? AND owner_epoch = ? AND status = 'running'"""
INSERT_INBOX_ENTRY = """
INSERT INTO inbox (task_id, dedupe_key, payload, created_at) VALUES (?, ?, ?, ?)
ON CONFLICT (task_id, dedupe_key) DO NOTHING"""
WAKE_WAITING_TASK = """
UPDATE tasks SET claimable_at = min(coalesce(claimable_at, :now), :now), updated_at = :now
 WHERE id = :task_id"""
TAKE_INBOX_ENTRIES = """
UPDATE inbox SET taken_seq = ?
 WHERE id IN (SELECT value FROM json_each(?)) AND task_id = ? AND taken_seq IS NULL"""
# From holding too: the wait is over, the task runs again under the same claim.
CONTINUE_TASK = """
UPDATE tasks SET last_seq = :seq, status = 'running', updated_at = :now WHERE id = :task_id"""
HOLD_TASK = """
UPDATE tasks SET last_seq = :seq, status = 'holding', updated_at = :now WHERE id = :task_id"""
# A delivery that arrived while the task ran must not be slept through.
WAIT_TASK = """
UPDATE tasks SET last_seq = :seq, status = 'waiting', lease_until = NULL, ready_at = :until,
       wake_prefix = :prefix,
       claimable_at = CASE
           WHEN EXISTS (SELECT 1 FROM inbox WHERE task_id = :task_id AND taken_seq IS NULL
                          AND (:prefix IS NULL OR
                               substr(coalesce(dedupe_key, ''), 1, length(:prefix)) = :prefix
                               OR dedupe_key = 'cancel'))
           THEN :now ELSE :until END,
       updated_at = :now
 WHERE id = :task_id"""
FINISH_TASK = """
UPDATE tasks SET last_seq = :seq, status = :status, lease_until = NULL, ready_at = NULL,
       claimable_at = NULL, updated_at = :now
 WHERE id = :task_id"""
READ_LOG = """
SELECT task_id, seq, type, data, created_at FROM events
 WHERE task_id = ? AND seq > ? ORDER BY seq"""
READ_UNTAKEN_INBOX = """
SELECT id, task_id, payload, dedupe_key, taken_seq, created_at FROM inbox
 WHERE task_id = ? AND taken_seq IS NULL ORDER BY id"""
READ_WHOLE_INBOX = """
SELECT id, task_id, payload, dedupe_key, taken_seq, created_at FROM inbox
 WHERE task_id = ? ORDER BY id"""
_TASK_COLUMNS = (
    "id, queue, status, owner, owner_epoch, lease_until, ready_at, last_seq, created_at, updated_at"
)
GET_TASK = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?"
LIST_TASKS = f"""
SELECT {_TASK_COLUMNS} FROM tasks
 WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
 ORDER BY created_at DESC, id
 LIMIT :limit"""
LIST_OWNED_CLAIMS = """
SELECT id, owner, owner_epoch, lease_until FROM tasks
 WHERE owner = ? AND status IN ('running', 'holding') ORDER BY id"""
UPSERT_SNAPSHOT = """
INSERT INTO snapshots (task_id, version, seq, data, created_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (task_id, version) DO UPDATE
   SET seq = excluded.seq, data = excluded.data, created_at = excluded.created_at
 WHERE snapshots.seq <= excluded.seq"""
GET_SNAPSHOT = "SELECT seq, data FROM snapshots WHERE task_id = ? AND version = ?"
NEXT_DUE_AFTER = "SELECT min(claimable_at) FROM tasks WHERE claimable_at > ?"
REGISTER_SCHEDULE = "INSERT INTO cron_schedules (name, mark) VALUES (?, ?) ON CONFLICT DO NOTHING"
ADVANCE_SCHEDULE = "UPDATE cron_schedules SET mark = max(mark, ?) WHERE name = ?"
READ_MARK = "SELECT mark, last_task FROM cron_schedules WHERE name = ?"
INSERT_FIRE = """
INSERT INTO cron_fires (schedule, slot, outcome, fired_at) VALUES (?, ?, 'missed', ?)
    ON CONFLICT DO NOTHING
"""
RECORD_FIRE = """
UPDATE cron_fires SET outcome = ?, task_id = ?, detail = ? WHERE schedule = ? AND slot = ?
"""
SET_LAST_TASK = "UPDATE cron_schedules SET last_task = ? WHERE name = ?"
UNTAKEN_CRON_MESSAGE = """
SELECT 1 FROM inbox WHERE task_id = ? AND taken_seq IS NULL AND substr(dedupe_key, 1, ?) = ?
"""
CRON_HISTORY = """
SELECT schedule, slot, outcome, task_id, detail, fired_at FROM cron_fires
 WHERE schedule = ? ORDER BY slot DESC LIMIT ?
"""
_PENDING = ("ready", "running", "holding", "waiting")


@dataclass(frozen=True, slots=True)
class _EncodedTask:
    """A `NewTask` with its payloads encoded and its time converted, ready to insert."""

    id: str
    queue: str
    ready_at: int | None
    events: list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class _EncodedDelivery:
    task_id: str
    dedupe_key: str | None
    payload: str


class SqliteStore:
    """The `Store` on one sqlite file. Open it with `await SqliteStore.open(path)`."""

    def __init__(
        self, path: str, connection: sqlite3.Connection, executor: ThreadPoolExecutor
    ) -> None:
        self._path = path
        self._connection = connection
        # One thread owns the connection: sqlite calls block, and must not block the loop.
        self._executor = executor
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        migrate: bool = True,
        check_schema: bool = True,
        busy_timeout_seconds: float = 30.0,
    ) -> SqliteStore:
        """Open (creating if need be) the store file; migrate it, or check it is current.

        `check_schema=False` is for `noeta db migrate`, which migrates it next.
        """
        if sqlite3.sqlite_version_info < _MINIMUM_SQLITE:
            raise ConfigError(f"noeta needs sqlite 3.24 or newer, not {sqlite3.sqlite_version}")
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noeta-sqlite")
        try:
            connect = functools.partial(_connect, path, busy_timeout_seconds)
            connection = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except sqlite3.Error as error:
            executor.shutdown(wait=False)
            raise StoreUnavailable(f"sqlite store {path}: {error}") from error
        store = cls(path, connection, executor)
        try:
            if migrate:
                await store.migrate()
            elif check_schema:
                await store._run(store._check_schema)
        except BaseException:
            await store.close()
            raise
        return store

    async def migrate(self) -> list[Migration]:
        """Apply the pending migrations in one transaction; return those applied."""
        return await self._run(self._migrate)

    async def create_task(self, task: NewTask) -> bool:
        encoded = _encode_task(task)
        return await self._run(self._write, lambda c, now: _insert_task(c, encoded, now))

    async def claim(self, worker: str, queues: Sequence[str], lease_seconds: float) -> Claim | None:
        lease = _lease_micros(lease_seconds)
        check_key("worker name", worker)
        if not queues:
            return None
        queue_list = encode(list(queues))
        # Peek outside the write lock first, so idle pollers do not queue up behind writers.
        due = await self._run(self._read_one, FIND_NEXT_CLAIMABLE, (_now_micros(), queue_list))
        if due is None:
            return None

        def claim_next(connection: sqlite3.Connection, now: int) -> Claim | None:
            row = connection.execute(FIND_NEXT_CLAIMABLE, (now, queue_list)).fetchone()
            if row is None:
                return None
            task_id, epoch, taken_over = row
            connection.execute(CLAIM_TASK, (worker, now + lease, now + lease, now, task_id))
            lease_until = _from_micros(now + lease)
            return Claim(task_id, worker, epoch + 1, lease_until, taken_over=bool(taken_over))

        return await self._run(self._write, claim_next)

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        now = _now_micros()
        row = await self._run(self._read_one, FIND_NEXT_DUE, (now, encode(list(queues))))
        return None if row is None else max(0.0, (row[0] - now) / 1_000_000)

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        values = (_now_micros(), encode(list(queues)))
        rows = await self._run(self._read_all, COUNT_CLAIMABLE, values)
        return {queue: count for queue, count in rows}

    async def claim_task(self, worker: str, task_id: str, lease_seconds: float) -> Claim | None:
        lease = _lease_micros(lease_seconds)
        check_key("worker name", worker)

        def claim_it(connection: sqlite3.Connection, now: int) -> Claim | None:
            row = connection.execute(FIND_THIS_TASK_IF_CLAIMABLE, (task_id, now)).fetchone()
            if row is None:
                return None
            connection.execute(CLAIM_TASK, (worker, now + lease, now + lease, now, task_id))
            return Claim(task_id, worker, row[1] + 1, _from_micros(now + lease))

        return await self._run(self._write, claim_it)

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        lease = _lease_micros(lease_seconds)
        if not claims:
            return {}

        def renew_all(connection: sqlite3.Connection, now: int) -> dict[str, Claim]:
            renewed = {}
            for claim in claims:
                values = (now + lease, now + lease, now, claim.task_id, claim.epoch)
                if connection.execute(RENEW_CLAIM, values).rowcount == 1:
                    renewed[claim.task_id] = Claim(
                        claim.task_id, claim.worker, claim.epoch, _from_micros(now + lease)
                    )
            return renewed

        return await self._run(self._write, renew_all)

    async def release(self, claim: Claim) -> bool:
        def release_one(connection: sqlite3.Connection, now: int) -> bool:
            values = (now, now, claim.task_id, claim.epoch)
            return bool(connection.execute(RELEASE_CLAIM, values).rowcount == 1)

        return await self._run(self._write, release_one)

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
        encoded_events = _encode_events(events)
        take_list = encode([int(entry) for entry in take])
        # Sorted by task id like the PostgreSQL client does (there, for lock order), so
        # that which duplicate wins and which unknown task is reported are the same.
        encoded_deliveries = sorted(map(_encode_delivery, deliveries), key=lambda d: d.task_id)
        encoded_tasks = [_encode_task(task) for task in new_tasks]
        next_kind, until = _next_state_values(next_state)
        task_id = claim.task_id

        def append_fenced(connection: sqlite3.Connection, now: int) -> int:
            row = connection.execute(LOCK_TASK_FOR_APPEND, (task_id,)).fetchone()
            if row is None:
                raise UnknownTask(task_id)
            epoch, status, lease_until, last_seq = row
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

            seq = expected_seq + len(encoded_events)
            connection.executemany(
                INSERT_EVENT,
                [
                    (task_id, expected_seq + number, event_type, data, now)
                    for number, (event_type, data) in enumerate(encoded_events, start=1)
                ],
            )
            if take:
                taken = connection.execute(TAKE_INBOX_ENTRIES, (seq, take_list, task_id)).rowcount
                if taken != len(take):
                    raise Conflict(
                        task_id, "an inbox entry to take is already taken or not this task's"
                    )
            for new_task in encoded_tasks:
                _insert_task(connection, new_task, now)
            for delivery in encoded_deliveries:
                _insert_delivery(connection, delivery, now)
            values = {"seq": seq, "now": now, "task_id": task_id}
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

    async def deliver(self, delivery: Delivery) -> bool:
        encoded = _encode_delivery(delivery)
        return await self._run(self._write, lambda c, now: _insert_delivery(c, encoded, now))

    async def read_log(self, task_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._run(self._read_all, READ_LOG, (task_id, after_seq))
        return [
            StoredEvent(task, seq, event_type, decode(data), _from_micros(created))
            for task, seq, event_type, data, created in rows
        ]

    async def read_inbox(self, task_id: str, *, untaken_only: bool = True) -> list[InboxEntry]:
        query = READ_UNTAKEN_INBOX if untaken_only else READ_WHOLE_INBOX
        rows = await self._run(self._read_all, query, (task_id,))
        return [
            InboxEntry(entry_id, task, decode(payload), key, taken, _from_micros(created))
            for entry_id, task, payload, key, taken, created in rows
        ]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._run(self._read_one, GET_TASK, (task_id,))
        return None if row is None else _task_record(row)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        if limit < 0:
            raise ConfigError(f"limit must be 0 or more, not {limit}")
        values = {"status": None if status is None else status.value, "queue": queue}
        rows = await self._run(self._read_all, LIST_TASKS, {**values, "limit": limit})
        return [_task_record(row) for row in rows]

    async def owned_by(self, worker: str) -> list[Claim]:
        rows = await self._run(self._read_all, LIST_OWNED_CLAIMS, (worker,))
        return [
            Claim(task_id, owner, epoch, _from_micros(lease_until))
            for task_id, owner, epoch, lease_until in rows
        ]

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        check_key("snapshot version", snapshot.version)

        def upsert(connection: sqlite3.Connection, now: int) -> None:
            if connection.execute(SELECT_TASK_STATUS, (snapshot.task_id,)).fetchone() is None:
                raise UnknownTask(snapshot.task_id)
            values = (snapshot.task_id, snapshot.version, snapshot.seq, bytes(snapshot.data), now)
            connection.execute(UPSERT_SNAPSHOT, values)

        await self._run(self._write, upsert)

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        found = await self.get_snapshot(task_id, snapshot_version)
        events = await self.read_log(task_id, after_seq=found.seq if found else 0)
        return LoadedTask(found, events, await self.read_inbox(task_id))

    async def get_snapshot(self, task_id: str, version: str) -> Snapshot | None:
        row = await self._run(self._read_one, GET_SNAPSHOT, (task_id, version))
        return None if row is None else Snapshot(task_id, version, row[0], bytes(row[1]))

    async def clock(self) -> datetime:
        return _from_micros(_now_micros())

    # --- the scheduler ------------------------------------------------------------------

    async def wake_due(self, since: datetime) -> tuple[datetime, datetime | None]:
        # No NOTIFY in sqlite: workers find due tasks at their next poll.
        check_moment(since)
        now = _now_micros()
        due = await self._run(self._read_one, NEXT_DUE_AFTER, (now,))
        return _from_micros(now), None if due[0] is None else _from_micros(due[0])

    async def cron_marks(
        self, schedules: Sequence[str], now: datetime, *, advance: Sequence[str] = ()
    ) -> dict[str, datetime]:
        names = [check_key("schedule name", name) for name in schedules]
        at = _to_micros(check_moment(now) or now)

        def register(connection: sqlite3.Connection, _: int) -> dict[str, datetime]:
            marks = {}
            for name in names:
                connection.execute(REGISTER_SCHEDULE, (name, at))
                if name in advance:
                    connection.execute(ADVANCE_SCHEDULE, (at, name))
                marks[name] = _from_micros(connection.execute(READ_MARK, (name,)).fetchone()[0])
            return marks

        return await self._run(self._write, register)

    async def fire_cron(self, fire: CronFire) -> FireOutcome:
        check_cron_fire(fire)
        action = fire.action
        task = _encode_task(action) if isinstance(action, NewTask) else None
        delivery = _encode_delivery(action) if isinstance(action, Delivery) else None
        slot = _to_micros(fire.slot)

        def fire_once(connection: sqlite3.Connection, now: int) -> FireOutcome:
            # The same steps as PostgreSQL's noeta_cron_fire, under the write lock.
            if connection.execute(INSERT_FIRE, (fire.schedule, slot, now)).rowcount == 0:
                return FireOutcome.ALREADY
            connection.execute(REGISTER_SCHEDULE, (fire.schedule, slot))
            last_task = connection.execute(READ_MARK, (fire.schedule,)).fetchone()[1]
            outcome, task_id, detail = FireOutcome.MISSED, None, fire.detail
            if task is not None:
                last = connection.execute(SELECT_TASK_STATUS, (last_task,)).fetchone()
                if fire.overlap == "skip" and last is not None and last[0] in _PENDING:
                    outcome, detail = (
                        FireOutcome.SKIPPED_OVERLAP,
                        f"task {last_task} is still {last[0]}",
                    )
                else:
                    _insert_task(connection, task, now)
                    connection.execute(SET_LAST_TASK, (task.id, fire.schedule))
                    outcome, task_id = FireOutcome.CREATED, task.id
            elif delivery is not None:
                task_id = delivery.task_id
                target = connection.execute(SELECT_TASK_STATUS, (task_id,)).fetchone()
                prefix = f"cron:{fire.schedule}:"
                if target is None or target[0] not in _PENDING:
                    state = "does not exist" if target is None else f"is {target[0]}"
                    outcome, detail = FireOutcome.NO_TARGET, f"task {task_id} {state}"
                elif (
                    fire.overlap == "skip"
                    and connection.execute(
                        UNTAKEN_CRON_MESSAGE, (task_id, len(prefix), prefix)
                    ).fetchone()
                ):
                    outcome = FireOutcome.SKIPPED_OVERLAP
                    detail = "the previous message is not taken yet"
                else:
                    _insert_delivery(connection, delivery, now)
                    outcome = FireOutcome.DELIVERED
            values = (outcome.value, task_id, detail, fire.schedule, slot)
            connection.execute(RECORD_FIRE, values)
            connection.execute(ADVANCE_SCHEDULE, (slot, fire.schedule))
            return outcome

        return await self._run(self._write, fire_once)

    async def cron_history(self, schedule: str, limit: int = 20) -> list[CronFireRecord]:
        rows = await self._run(self._read_all, CRON_HISTORY, (schedule, limit))
        return [
            CronFireRecord(
                name, _from_micros(slot), FireOutcome(outcome), task, detail, _from_micros(at)
            )
            for name, slot, outcome, task, detail, at in rows
        ]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._connection.close)
        finally:
            self._executor.shutdown(wait=False)

    # Everything below runs in the store's thread.

    async def _run(self, function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if self._closed:
            raise StoreUnavailable(f"sqlite store {self._path} is closed")
        call = functools.partial(self._translated, functools.partial(function, *args, **kwargs))
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _translated(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except UnicodeEncodeError as error:
            # Binding a lone surrogate: no UTF-8 column can hold it (writes check first).
            raise PayloadError(f"a value cannot be stored as UTF-8: {error.reason}") from error
        except sqlite3.OperationalError as error:
            # Chiefly "database is locked": another process held the write lock for longer
            # than the busy timeout. Nothing was written.
            raise StoreUnavailable(f"sqlite store {self._path}: {error}") from error
        except sqlite3.Error as error:
            raise StoreError(f"sqlite store {self._path}: {error}") from error

    def _write(self, body: Callable[[sqlite3.Connection, int], _T]) -> _T:
        """Run `body(connection, now)` in one BEGIN IMMEDIATE transaction."""
        with self._transaction() as connection:
            # Read the clock only once the write lock is held: the wait may have been long.
            return body(connection, _now_micros())

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        connection = self._connection
        # IMMEDIATE takes the write lock now, so no other process writes between our checks
        # and our writes, and a busy file fails here rather than at a lock upgrade.
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        try:
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            if connection.in_transaction:
                # sqlite keeps the transaction open when COMMIT is refused (busy): the
                # write certainly did not land.
                connection.execute("ROLLBACK")
                raise
            raise CommitUnknown(f"sqlite store {self._path}: COMMIT failed: {error}") from error

    def _read_one(self, query: str, values: Sequence[Any] | Mapping[str, Any]) -> Any:
        return self._connection.execute(query, values).fetchone()

    def _read_all(self, query: str, values: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        return self._connection.execute(query, values).fetchall()

    def _migrate(self) -> list[Migration]:
        known = load_migrations("sqlite")
        # One transaction, write lock first: a second process migrating at the same time
        # waits, then finds nothing pending.
        with self._transaction() as connection:
            connection.execute(CREATE_MIGRATIONS_TABLE)
            applied = dict(connection.execute(SELECT_APPLIED_MIGRATIONS).fetchall())
            todo = pending(known, applied)
            for migration in todo:
                for statement in _statements(migration.sql):
                    connection.execute(statement)
                connection.execute(
                    RECORD_MIGRATION, (migration.version, migration.name, _now_micros())
                )
        return todo

    def _check_schema(self) -> None:
        applied: dict[int, str] = {}
        if self._connection.execute(FIND_MIGRATIONS_TABLE).fetchone() is not None:
            applied = dict(self._connection.execute(SELECT_APPLIED_MIGRATIONS).fetchall())
        require_current(load_migrations("sqlite"), applied)


def _connect(path: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    # isolation_level=None: the module never opens transactions behind our back; every
    # write says BEGIN IMMEDIATE itself. timeout= is sqlite's busy timeout.
    connection = sqlite3.connect(path, timeout=busy_timeout_seconds, isolation_level=None)
    try:
        # WAL: readers never block the writer nor the writer them, across processes.
        connection.execute("PRAGMA journal_mode = WAL")
        # FULL (the default, said aloud): a committed append survives a power cut.
        connection.execute("PRAGMA synchronous = FULL")
        connection.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        connection.close()
        raise
    return connection


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements: `executescript` would COMMIT our transaction.

    A comment-only script yields only an empty statement, which sqlite runs as a no-op.
    """
    statement = ""
    for piece in script.split(";"):
        statement += piece + ";"
        # A ';' inside a comment or a string does not complete a statement.
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""


def _insert_task(connection: sqlite3.Connection, task: _EncodedTask, now: int) -> bool:
    claimable_at = now if task.ready_at is None else task.ready_at
    values = (task.id, task.queue, task.ready_at, claimable_at, len(task.events), now, now)
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


def _insert_delivery(connection: sqlite3.Connection, delivery: _EncodedDelivery, now: int) -> bool:
    row = connection.execute(SELECT_TASK_STATUS, (delivery.task_id,)).fetchone()
    if row is None:
        raise UnknownTask(delivery.task_id)
    values = (delivery.task_id, delivery.dedupe_key, delivery.payload, now)
    inserted = bool(connection.execute(INSERT_INBOX_ENTRY, values).rowcount == 1)
    status, prefix = row
    key = delivery.dedupe_key or ""
    wakes = prefix is None or key.startswith(prefix) or key == CANCEL_KEY
    if inserted and status == "waiting" and wakes:
        connection.execute(WAKE_WAITING_TASK, {"now": now, "task_id": delivery.task_id})
    return inserted


def _encode_events(events: Sequence[NewEvent]) -> list[tuple[str, str]]:
    return [(check_key("event type", event.type), encode(event.data)) for event in events]


def _encode_task(task: NewTask) -> _EncodedTask:
    ready_at = None if task.ready_at is None else _to_micros(task.ready_at)
    return _EncodedTask(
        check_key("task id", task.id),
        check_key("queue name", task.queue),
        ready_at,
        _encode_events(task.events),
    )


def _encode_delivery(delivery: Delivery) -> _EncodedDelivery:
    key = delivery.dedupe_key
    return _EncodedDelivery(
        check_key("task id", delivery.task_id),
        None if key is None else check_key("dedupe key", key),
        encode(delivery.payload),
    )


def _next_state_values(next_state: NextState) -> tuple[str, int | None]:
    """The state as the PostgreSQL function takes it: (p_next, p_until)."""
    match next_state:
        case Continue():
            return "continue", None
        case WaitHolding():
            return "wait_holding", None
        case Wait(until=until):
            return "wait", None if until is None else _to_micros(until)
        case Finish(status=status):
            return status.value, None
    raise TypeError(f"not a next state: {next_state!r}")


def _task_record(row: Any) -> TaskRecord:
    task_id, queue, status, owner, epoch, lease_until, ready_at, last_seq, created, updated = row
    return TaskRecord(
        id=task_id,
        queue=queue,
        status=TaskStatus(status),
        owner=owner,
        owner_epoch=epoch,
        lease_until=None if lease_until is None else _from_micros(lease_until),
        ready_at=None if ready_at is None else _from_micros(ready_at),
        last_seq=last_seq,
        created_at=_from_micros(created),
        updated_at=_from_micros(updated),
    )


def _lease_micros(lease_seconds: float) -> int:
    return max(1, round(check_lease(lease_seconds) * 1_000_000))


def _now_micros() -> int:
    return time.time_ns() // 1000


def _to_micros(moment: datetime) -> int:
    check_moment(moment)
    return (moment - _EPOCH) // _MICROSECOND


def _from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)

"""The PostgreSQL task store, on psycopg 3 and psycopg_pool (async).

Every operation is one statement in autocommit (its own transaction, one round trip);
the multi-step writes are the functions of `queue/postgres/0005_create_store_functions.sql`.
No transaction is ever held open across a model or tool call. Every call has an
application deadline: a blackholed connection fails in seconds, not when TCP gives up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from noeta.backends.stores import migrations
from noeta.core import payload
from noeta.core.errors import (
    CommitUnknown,
    ConfigError,
    Conflict,
    StoreError,
    StoreUnavailable,
    UnknownTask,
)
from noeta.core.store import (
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

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_DEADLINE_SECONDS = 10.0
DEADLOCK_RETRIES = 5
# Deadlock and serialization failure: the statement was rolled back whole; re-run it.
_RETRYABLE = {"40P01", "40001"}
# Insufficient privilege, statement or lock timeout: refused, nothing written.
_REFUSED = {"42501", "57014", "55P03"}

# Claim the task that has been due longest. now() (the statement's start; this statement
# is its own transaction) is stable, so PostgreSQL can use it as the index bound and stop
# the scan at the present; clock_timestamp() is volatile and would make it a filter that
# walks every future-dated row. SKIP LOCKED: claimants never wait on each other.
CLAIM_NEXT_TASK = """
WITH due AS MATERIALIZED (
    SELECT id, status IN ('running', 'holding') AS taken_over FROM tasks
     WHERE claimable_at <= now() AND queue = ANY(%(queues)s::text[])
     ORDER BY claimable_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED
), lease AS (
    SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until
)
UPDATE tasks AS t
   SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
       lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM due, lease
 WHERE t.id = due.id
RETURNING t.id, t.owner_epoch, t.lease_until, due.taken_over
"""

# The same, for one named task (noeta run claims the task it just created).
CLAIM_THIS_TASK = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
       lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease
 WHERE t.id = %(id)s AND t.claimable_at <= clock_timestamp()
RETURNING t.id, t.owner_epoch, t.lease_until
"""

# The same index walk as the claim, for the first row not yet due.
SECONDS_UNTIL_DUE = """
SELECT extract(epoch FROM claimable_at - clock_timestamp())::float8 FROM tasks
 WHERE claimable_at > now() AND queue = ANY(%(queues)s::text[])
 ORDER BY claimable_at LIMIT 1
"""

# The claim index alone answers it (claimable_at INCLUDE queue): only claimable rows.
COUNT_CLAIMABLE = """
SELECT queue, count(*) FROM tasks
 WHERE claimable_at <= now() AND queue = ANY(%(queues)s::text[])
 GROUP BY queue
"""

# One statement renews every claim of a worker's renewal round.
RENEW_CLAIMS = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease, unnest(%(ids)s::text[], %(epochs)s::bigint[]) AS held(id, epoch)
 WHERE t.id = held.id AND t.owner_epoch = held.epoch AND t.status IN ('running', 'holding')
RETURNING t.id, t.owner_epoch, t.lease_until
"""

RELEASE_CLAIM = """
UPDATE tasks
   SET status = 'ready', lease_until = NULL, ready_at = NULL,
       claimable_at = clock_timestamp(), updated_at = clock_timestamp()
 WHERE id = %(id)s AND owner_epoch = %(epoch)s AND status = 'running'
RETURNING id
"""

CREATE_TASK = """
SELECT noeta_create_task(%(id)s, %(queue)s, %(ready_at)s, %(types)s::text[], %(data)s::text[])
"""

APPEND_EVENTS = """
SELECT noeta_append(
    %(task)s, %(epoch)s, %(expected_seq)s, %(types)s::text[], %(data)s::text[],
    %(take)s::bigint[], %(next)s, %(until)s, %(wake_prefix)s,
    %(new_ids)s::text[], %(new_queues)s::text[], %(new_ready)s::timestamptz[],
    %(new_counts)s::int[], %(new_types)s::text[], %(new_data)s::text[],
    %(deliver_tasks)s::text[], %(deliver_keys)s::text[], %(deliver_payloads)s::text[])
"""

# The common case (events only, keep running) has a lighter statement: fewer parameters.
APPEND_EVENTS_ONLY = """
SELECT noeta_append_events(%(task)s, %(epoch)s, %(expected_seq)s, %(types)s::text[],
                           %(data)s::text[])
"""

LISTEN_FOR_WAKEUPS = "LISTEN noeta_wake"
ANY_QUEUE = "*"

DELIVER = "SELECT noeta_deliver(%(task)s, %(key)s, %(payload)s)"

READ_LOG = """
SELECT task_id, seq, type, data, created_at FROM events
 WHERE task_id = %(task)s AND seq > %(after)s ORDER BY seq
"""

# The log after the snapshot of this version, if any: one round trip with the snapshot.
READ_LOG_AFTER_SNAPSHOT = """
SELECT task_id, seq, type, data, created_at FROM events
 WHERE task_id = %(task)s
   AND seq > coalesce((SELECT seq FROM snapshots
                        WHERE task_id = %(task)s AND version = %(version)s), 0)
 ORDER BY seq
"""

READ_INBOX = """
SELECT id, task_id, payload, dedupe_key, taken_seq, created_at FROM inbox
 WHERE task_id = %(task)s AND (taken_seq IS NULL OR NOT %(untaken_only)s) ORDER BY id
"""

TASK_COLUMNS = (
    "id, queue, status, owner, owner_epoch, lease_until, ready_at, last_seq, created_at, updated_at"
)
GET_TASK = f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = %(id)s"
LIST_TASKS = f"""
SELECT {TASK_COLUMNS} FROM tasks
 WHERE (%(status)s::text IS NULL OR status = %(status)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
 ORDER BY created_at DESC, id LIMIT %(limit)s
"""

OWNED_BY = """
SELECT id, owner_epoch, lease_until FROM tasks
 WHERE owner = %(worker)s AND status IN ('running', 'holding') ORDER BY id
"""

PUT_SNAPSHOT = """
INSERT INTO snapshots (task_id, version, seq, data)
VALUES (%(task)s, %(version)s, %(seq)s, %(data)s)
ON CONFLICT (task_id, version) DO UPDATE SET seq = excluded.seq, data = excluded.data,
    created_at = clock_timestamp()
 WHERE snapshots.seq <= excluded.seq
"""

GET_SNAPSHOT = """
SELECT task_id, version, seq, data FROM snapshots WHERE task_id = %(task)s AND version = %(version)s
"""

WAKE_DUE = """
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT DISTINCT queue FROM tasks, clock
     WHERE claimable_at > %(since)s AND claimable_at <= clock.now
       AND status IN ('ready', 'waiting')
),
told AS (SELECT pg_notify('noeta_wake', queue) FROM due)
SELECT clock.now,
       (SELECT min(claimable_at) FROM tasks WHERE claimable_at > clock.now),
       (SELECT count(*) FROM told)
  FROM clock
"""
# Registers new schedules at `now`, moves the `advance` ones (disabled) up to it, and
# reads every mark. Run every second by every scheduler: DO NOTHING leaves an existing row
# untouched (DO UPDATE would lock it, and write, each time). Rows this statement wrote
# come from `registered` and `advanced`; the rest from the table.
CRON_MARKS = """
WITH registered AS (
    INSERT INTO cron_schedules (name, mark)
    SELECT unnest(%(names)s::text[]), %(now)s
        ON CONFLICT (name) DO NOTHING
    RETURNING name, mark
), advanced AS (
    UPDATE cron_schedules SET mark = %(now)s
     WHERE name = ANY(%(advance)s::text[]) AND mark < %(now)s
    RETURNING name, mark
)
SELECT name, mark FROM registered
UNION ALL
SELECT name, mark FROM advanced
UNION ALL
SELECT name, mark FROM cron_schedules
 WHERE name = ANY(%(names)s::text[])
   AND name NOT IN (SELECT name FROM registered)
   AND name NOT IN (SELECT name FROM advanced)
"""
FIRE_CRON = """
SELECT noeta_cron_fire(%(schedule)s, %(slot)s, %(kind)s, %(overlap)s, %(detail)s, %(task)s,
                       %(queue)s, %(types)s, %(data)s, %(key)s, %(payload)s)
"""
CRON_HISTORY = """
SELECT schedule, slot, outcome, task_id, detail, fired_at FROM cron_fires
 WHERE schedule = %(schedule)s ORDER BY slot DESC LIMIT %(limit)s
"""

MIGRATION_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended('noeta.migrate:' || current_schema(), 0))"
)
CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS noeta_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
APPLIED_MIGRATIONS = "SELECT version, name FROM noeta_migrations"
APPLIED_MIGRATIONS_IF_ANY = """
SELECT version, name FROM noeta_migrations WHERE to_regclass('noeta_migrations') IS NOT NULL
"""
MIGRATIONS_TABLE_EXISTS = "SELECT to_regclass('noeta_migrations') IS NOT NULL"
RECORD_MIGRATION = "INSERT INTO noeta_migrations (version, name) VALUES (%s, %s)"


def describe(dsn: str) -> str:
    """`host:port/dbname` of a DSN, for messages: never the password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparseable PostgreSQL URL"
    host = parts.get("host") or os.environ.get("PGHOST") or "localhost"
    port = parts.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = parts.get("dbname") or ""
    return f"{host}:{port}/{dbname}"


class PostgresStore:
    """A `Store` on one PostgreSQL database (or schema, via the URL's search_path)."""

    def __init__(
        self, pool: AsyncConnectionPool[Any], where: str, deadline_seconds: float, dsn: str = ""
    ) -> None:
        self._pool = pool
        self._dsn = dsn  # for the LISTEN connection, which cannot come from the pool
        self.where = where
        self.deadline_seconds = deadline_seconds

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        application_name: str = "noeta",
        migrate: bool = False,
        max_connections: int = 10,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        idle_in_transaction_seconds: float = 30.0,
    ) -> PostgresStore:
        """Connect, check (or with `migrate`, bring up to date) the schema, open the pool."""
        where = describe(dsn)
        settings = {
            "application_name": application_name,
            "connect_timeout": max(1, round(deadline_seconds)),
            # A frozen client's open transaction must not hold a task row for long.
            "options": _options(dsn, idle_in_transaction_seconds),
        }
        if migrate:
            await migrate_database(dsn, **settings)
        else:
            await check_schema(dsn, **settings)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            kwargs={**settings, "autocommit": True},
            min_size=1,
            max_size=max_connections,
            open=False,
            timeout=deadline_seconds,
            name=f"noeta:{where}",
        )
        try:
            await pool.open(wait=True, timeout=deadline_seconds)
        except PoolTimeout as error:
            await pool.close()
            raise StoreUnavailable(f"cannot reach PostgreSQL at {where}") from error
        return cls(pool, where, deadline_seconds, dsn)

    async def close(self) -> None:
        await self._pool.close()

    async def wakeups(self) -> AsyncIterator[str]:
        """Queue names in which a task just became claimable (LISTEN noeta_wake), and "*"
        each time listening (re)starts. Reconnects after a lost connection."""
        while True:
            try:
                connection = await psycopg.AsyncConnection.connect(
                    self._dsn,
                    autocommit=True,
                    application_name="noeta-listen",
                    connect_timeout=max(1, round(self.deadline_seconds)),
                )
            except psycopg.OperationalError:
                await asyncio.sleep(self.deadline_seconds)
                continue
            try:
                await connection.execute(LISTEN_FOR_WAKEUPS)
                # Anything that became claimable before the LISTEN took effect was not
                # announced: "*" tells the listener to look now.
                yield ANY_QUEUE
                async for notification in connection.notifies():
                    yield notification.payload
            except psycopg.OperationalError:
                await asyncio.sleep(1)
            finally:
                await connection.close()

    # --- the Store protocol ------------------------------------------------------------

    async def create_task(self, task: NewTask) -> bool:
        types, data = _encode_task(task)
        params = {
            "id": task.id,
            "queue": task.queue,
            "ready_at": task.ready_at,
            "types": types,
            "data": data,
        }
        row = await self._write(CREATE_TASK, params)
        return bool(row and row[0])

    async def claim(self, worker: str, queues: Sequence[str], lease_seconds: float) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        params = {"worker": worker, "queues": list(queues), "lease": lease_seconds}
        row = await self._write(CLAIM_NEXT_TASK, params)
        if row is None:
            return None
        return Claim(row[0], worker, row[1], row[2], taken_over=row[3])

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        rows = await self._read(SECONDS_UNTIL_DUE, {"queues": list(queues)})
        return max(0.0, rows[0][0]) if rows else None

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        rows = await self._read(COUNT_CLAIMABLE, {"queues": list(queues)})
        return {queue: count for queue, count in rows}

    async def claim_task(self, worker: str, task_id: str, lease_seconds: float) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        params = {"worker": worker, "id": task_id, "lease": lease_seconds}
        row = await self._write(CLAIM_THIS_TASK, params)
        if row is None:
            return None
        return Claim(task_id=row[0], worker=worker, epoch=row[1], lease_until=row[2])

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        check_lease(lease_seconds)
        if not claims:
            return {}
        by_id = {claim.task_id: claim for claim in claims}
        params = {
            "lease": lease_seconds,
            "ids": [c.task_id for c in claims],
            "epochs": [c.epoch for c in claims],
        }
        rows = await self._write_many(RENEW_CLAIMS, params)
        return {
            task_id: Claim(task_id, by_id[task_id].worker, epoch, lease_until)
            for task_id, epoch, lease_until in rows
        }

    async def release(self, claim: Claim) -> bool:
        row = await self._write(RELEASE_CLAIM, {"id": claim.task_id, "epoch": claim.epoch})
        return row is not None

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
        types, data = _encode_events(events)
        if not (take or deliveries or new_tasks) and isinstance(next_state, Continue):
            light = {
                "task": claim.task_id,
                "epoch": claim.epoch,
                "expected_seq": expected_seq,
                "types": types,
                "data": data,
            }
            row = await self._write(APPEND_EVENTS_ONLY, light, task_id=claim.task_id)
            assert row is not None
            appended: int = row[0]
            return appended
        new_types: list[str] = []
        new_data: list[str] = []
        for task in new_tasks:
            task_types, task_data = _encode_task(task)
            new_types += task_types
            new_data += task_data
        # Lock order: the appending task's row first (inside the function), then the
        # rows it delivers to, in id order.
        ordered = sorted(deliveries, key=lambda delivery: delivery.task_id)
        next_name, until = _next_state(next_state)
        params = {
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
            "deliver_keys": [_dedupe_key(d) for d in ordered],
            "deliver_payloads": [payload.encode(d.payload) for d in ordered],
        }
        row = await self._write(APPEND_EVENTS, params, task_id=claim.task_id)
        assert row is not None
        last_seq: int = row[0]
        return last_seq

    async def deliver(self, delivery: Delivery) -> bool:
        params = {
            "task": delivery.task_id,
            "key": _dedupe_key(delivery),
            "payload": payload.encode(delivery.payload),
        }
        row = await self._write(DELIVER, params, task_id=delivery.task_id)
        return bool(row and row[0])

    async def read_log(self, task_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._read(READ_LOG, {"task": task_id, "after": after_seq})
        return [StoredEvent(r[0], r[1], r[2], payload.decode(r[3]), r[4]) for r in rows]

    async def read_inbox(self, task_id: str, *, untaken_only: bool = True) -> list[InboxEntry]:
        rows = await self._read(READ_INBOX, {"task": task_id, "untaken_only": untaken_only})
        return [InboxEntry(r[0], r[1], payload.decode(r[2]), r[3], r[4], r[5]) for r in rows]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        rows = await self._read(GET_TASK, {"id": task_id})
        return _task_record(rows[0]) if rows else None

    async def list_tasks(
        self, *, status: TaskStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        params = {"status": status.value if status else None, "queue": queue, "limit": limit}
        return [_task_record(row) for row in await self._read(LIST_TASKS, params)]

    async def owned_by(self, worker: str) -> list[Claim]:
        rows = await self._read(OWNED_BY, {"worker": worker})
        return [Claim(task_id, worker, epoch, lease_until) for task_id, epoch, lease_until in rows]

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        params = {
            "task": snapshot.task_id,
            "version": snapshot.version,
            "seq": snapshot.seq,
            "data": snapshot.data,
        }
        check_key("snapshot version", snapshot.version)
        await self._write_many(PUT_SNAPSHOT, params, task_id=snapshot.task_id)

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        snapshot_params = {"task": task_id, "version": snapshot_version}
        snapshots, events, inbox = await self._run_all(
            [
                (GET_SNAPSHOT, snapshot_params),
                (READ_LOG_AFTER_SNAPSHOT, snapshot_params),
                (READ_INBOX, {"task": task_id, "untaken_only": True}),
            ],
            write=False,
        )
        found = None
        if snapshots:
            task, version, seq, data = snapshots[0]
            found = Snapshot(task, version, seq, bytes(data))
        return LoadedTask(
            found,
            [StoredEvent(r[0], r[1], r[2], payload.decode(r[3]), r[4]) for r in events],
            [InboxEntry(r[0], r[1], payload.decode(r[2]), r[3], r[4], r[5]) for r in inbox],
        )

    async def get_snapshot(self, task_id: str, version: str) -> Snapshot | None:
        rows = await self._read(GET_SNAPSHOT, {"task": task_id, "version": version})
        return Snapshot(rows[0][0], rows[0][1], rows[0][2], bytes(rows[0][3])) if rows else None

    async def clock(self) -> datetime:
        rows = await self._read("SELECT clock_timestamp()", {})
        now: datetime = rows[0][0]
        return now

    # --- the scheduler ------------------------------------------------------------------

    async def wake_due(self, since: datetime) -> tuple[datetime, datetime | None]:
        check_moment(since)
        rows = await self._write_many(WAKE_DUE, {"since": since})
        return rows[0][0], rows[0][1]

    async def cron_marks(
        self, schedules: Sequence[str], now: datetime, *, advance: Sequence[str] = ()
    ) -> dict[str, datetime]:
        names = [check_key("schedule name", name) for name in schedules]
        params = {"names": names, "now": check_moment(now), "advance": list(advance)}
        return {name: mark for name, mark in await self._write_many(CRON_MARKS, params)}

    async def fire_cron(self, fire: CronFire) -> FireOutcome:
        check_cron_fire(fire)
        action = fire.action
        params: dict[str, Any] = {
            "schedule": fire.schedule,
            "slot": fire.slot,
            "overlap": fire.overlap,
            "detail": fire.detail,
            "kind": "missed",
            "task": None,
            "queue": None,
            "types": None,
            "data": None,
            "key": None,
            "payload": None,
        }
        if isinstance(action, NewTask):
            types, data = _encode_task(action)
            params |= {"kind": "task", "task": action.id, "queue": action.queue}
            params |= {"types": types, "data": data}
        elif isinstance(action, Delivery):
            params |= {"kind": "message", "task": action.task_id, "key": _dedupe_key(action)}
            params["payload"] = payload.encode(action.payload)
        row = await self._write(FIRE_CRON, params)
        assert row is not None
        return FireOutcome(row[0])

    async def cron_history(self, schedule: str, limit: int = 20) -> list[CronFireRecord]:
        rows = await self._read(CRON_HISTORY, {"schedule": schedule, "limit": limit})
        return [
            CronFireRecord(name, slot, FireOutcome(outcome), task, detail, fired_at)
            for name, slot, outcome, task, detail, fired_at in rows
        ]

    # --- running statements under a deadline -------------------------------------------

    async def _write(
        self, query: str, params: Mapping[str, Any], *, task_id: str | None = None
    ) -> tuple[Any, ...] | None:
        rows = await self._write_many(query, params, task_id=task_id)
        return rows[0] if rows else None

    async def _write_many(
        self, query: str, params: Mapping[str, Any], *, task_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        """Run a write; a broken connection means its outcome is unknown (CommitUnknown)."""
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                return await self._run(query, params, write=True)
            except psycopg.Error as error:
                state = error.sqlstate
                if state == "NT409":
                    raise Conflict(task_id or "?", _message(error)) from None
                if state == "NT404":
                    raise UnknownTask(_message(error)) from None
                if state == "23503":  # a foreign key: the row names a task that does not exist
                    raise UnknownTask(task_id or "?") from None
                if state in _RETRYABLE and attempt < DEADLOCK_RETRIES:
                    log.info("store: %s; re-running the statement with its checks", state)
                    continue
                raise
        raise AssertionError("unreachable")

    async def _read(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return await self._run(query, params, write=False)

    async def _run(
        self, query: str, params: Mapping[str, Any], *, write: bool
    ) -> list[tuple[Any, ...]]:
        return (await self._run_all([(query, params)], write=write))[0]

    async def _run_all(
        self, statements: Sequence[tuple[str, Mapping[str, Any]]], *, write: bool
    ) -> list[list[tuple[Any, ...]]]:
        """Run statements in one round trip (pipelined), under one deadline."""
        try:
            connection = await self._pool.getconn()
        except PoolTimeout as error:
            raise StoreUnavailable(f"cannot reach PostgreSQL at {self.where}") from error
        try:
            return await _within_deadline(
                connection, lambda: _fetch_all(connection, statements), self.deadline_seconds
            )
        except (psycopg.Error, TimeoutError) as error:
            if isinstance(error, psycopg.Error) and error.sqlstate in _REFUSED:
                # The server refused the statement (a missing grant, a server-side
                # timeout): nothing was written, and it is the deployment's to fix. A
                # StoreError leaves the task for a later claim instead of failing it.
                raise StoreError(
                    f"PostgreSQL at {self.where} refused a statement: {_reason(error)} "
                    f"(SQLSTATE {error.sqlstate})"
                ) from None
            if isinstance(error, psycopg.Error) and (
                not isinstance(error, psycopg.OperationalError) or not connection.broken
            ):
                raise  # the server answered with an error: the outcome is known
            if write:
                raise CommitUnknown(
                    f"lost the connection to PostgreSQL at {self.where} while a write was "
                    "committing; it may or may not have landed"
                ) from None
            raise StoreUnavailable(f"lost the connection to PostgreSQL at {self.where}") from None
        finally:
            await self._pool.putconn(connection)


async def _fetch_all(
    connection: psycopg.AsyncConnection[Any], statements: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[list[tuple[Any, ...]]]:
    if len(statements) == 1:
        return [await _fetch(connection, *statements[0])]
    cursors = []
    async with connection.pipeline():
        for query, params in statements:
            cursor = connection.cursor()
            await cursor.execute(query, params)
            cursors.append(cursor)
    results = []
    for cursor in cursors:
        rows: list[tuple[Any, ...]] = await cursor.fetchall() if cursor.description else []
        results.append(rows)
        await cursor.close()
    return results


async def _fetch(
    connection: psycopg.AsyncConnection[Any], query: str, params: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    async with connection.cursor() as cursor:
        await cursor.execute(query, params)
        if cursor.description is None:
            return []
        rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return rows


async def _within_deadline(
    connection: psycopg.AsyncConnection[Any],
    call: Callable[[], Awaitable[T]],
    deadline_seconds: float,
) -> T:
    """Run `call`; past the deadline, break the connection's socket and raise TimeoutError.

    Cancelling a psycopg query first waits (seconds) for the server to confirm the
    cancel, which a blackholed connection never does. Shutting the socket down makes
    the pending read fail at once; the pool then discards the broken connection.
    """
    loop = asyncio.get_running_loop()
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        _shut_socket(connection)

    # A timer, not a task around the call: it costs nothing unless it fires.
    timer = loop.call_later(deadline_seconds, expire)
    try:
        return await call()
    except Exception:
        if expired:
            raise TimeoutError(f"no answer within {deadline_seconds} s") from None
        raise
    finally:
        timer.cancel()


def _shut_socket(connection: psycopg.AsyncConnection[Any]) -> None:
    try:
        duplicate = socket.socket(fileno=os.dup(connection.fileno()))
    except (OSError, psycopg.Error):
        return
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()


# --- schema ------------------------------------------------------------------------------


async def _connect(dsn: str, **settings: Any) -> psycopg.AsyncConnection[Any]:
    where = describe(dsn)
    try:
        return await psycopg.AsyncConnection.connect(dsn, **settings)
    except psycopg.OperationalError as error:
        raise StoreUnavailable(
            f"cannot connect to PostgreSQL at {where}: {_reason(error)}"
        ) from None
    except psycopg.ProgrammingError as error:
        raise ConfigError(f"invalid PostgreSQL URL ({where}): {_reason(error)}") from None


async def check_schema(dsn: str, **settings: Any) -> None:
    """Raise `SchemaMismatch` unless the database has exactly this code's migrations."""
    async with await _connect(dsn, **settings, autocommit=True) as connection:
        applied = await _applied(connection)
    migrations.require_current(migrations.load_migrations("postgres"), applied)


async def migrate_database(dsn: str, **settings: Any) -> list[migrations.Migration]:
    """Apply every pending migration in one transaction under an advisory lock.

    Safe when several processes migrate at once: the second waits for the first, then
    finds nothing to do. Returns the migrations it applied.
    """
    known = migrations.load_migrations("postgres")
    async with await _connect(dsn, **settings) as connection:
        try:
            async with connection.transaction():
                await connection.execute(MIGRATION_LOCK)
                await connection.execute(CREATE_MIGRATIONS_TABLE)
                applied = await _applied(connection)
                todo = migrations.pending(known, applied)
                for migration in todo:
                    await connection.execute(sql.SQL(migration.sql))
                    record = (migration.version, migration.name)
                    await connection.execute(RECORD_MIGRATION, record)
        except psycopg.errors.InsufficientPrivilege as error:
            raise StoreError(
                f"cannot migrate PostgreSQL at {describe(dsn)}: {_reason(error)}; "
                "run `noeta db migrate` as the schema's owner"
            ) from None
    return todo


async def _applied(connection: psycopg.AsyncConnection[Any]) -> dict[int, str]:
    cursor = await connection.execute(MIGRATIONS_TABLE_EXISTS)
    row = await cursor.fetchone()
    if not row or not row[0]:
        return {}
    cursor = await connection.execute(APPLIED_MIGRATIONS)
    return {version: name for version, name in await cursor.fetchall()}


# --- encoding ------------------------------------------------------------------------------


def _encode_events(events: Sequence[NewEvent]) -> tuple[list[str], list[str]]:
    types = [check_key("event type", event.type) for event in events]
    return types, [payload.encode(event.data) for event in events]


def _encode_task(task: NewTask) -> tuple[list[str], list[str]]:
    check_key("task id", task.id)
    check_moment(task.ready_at)
    check_key("queue name", task.queue)
    return _encode_events(task.events)


def _dedupe_key(delivery: Delivery) -> str | None:
    check_key("task id", delivery.task_id)
    return None if delivery.dedupe_key is None else check_key("dedupe key", delivery.dedupe_key)


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


def _task_record(row: tuple[Any, ...]) -> TaskRecord:
    return TaskRecord(row[0], row[1], TaskStatus(row[2]), *row[3:])


def _options(dsn: str, idle_in_transaction_seconds: float) -> str:
    existing = conninfo_to_dict(dsn).get("options") or ""
    timeout_ms = int(idle_in_transaction_seconds * 1000)
    return f"{existing} -c idle_in_transaction_session_timeout={timeout_ms}".strip()


def _message(error: psycopg.Error) -> str:
    return error.diag.message_primary or str(error)


_LIBPQ_PREFIXES = re.compile(
    r"connection failed: "
    r'|connection to server at "[^"]*"(?: \([^)]*\))?, port \d+ failed: '
    r"|FATAL:\s+"
)


def _reason(error: psycopg.Error) -> str:
    """The server's or libpq's reason, on one line (libpq never includes the password)."""
    lines = (error.diag.message_primary or str(error)).strip().splitlines()
    return _LIBPQ_PREFIXES.sub("", lines[0]).strip() if lines else type(error).__name__

"""One round trip on a connection: statements sent (pipelined where more than one), their
rows read, under an application deadline that breaks the socket of a connection that does
not answer."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK


async def fetch_all(
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
        rows: list[tuple[Any, ...]] = await cursor.fetchall() if _has_rows(cursor) else []
        results.append(rows)
        await cursor.close()
    return results


async def _fetch(
    connection: psycopg.AsyncConnection[Any], query: str, params: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    async with connection.cursor() as cursor:
        await cursor.execute(query, params)
        if not _has_rows(cursor):
            return []
        rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return rows


def _has_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned rows (zero or more): what `cursor.description`
    says, without building a Column object per column for every statement."""
    result = cursor.pgresult
    return result is not None and (result.nfields > 0 or result.status == _TUPLES_OK)


async def fetch_within_deadline(
    connection: psycopg.AsyncConnection[Any],
    query: str,
    params: Mapping[str, Any],
    deadline_seconds: float,
) -> list[tuple[Any, ...]]:
    """One statement on a session the caller holds itself (outside the pool's rounds, as
    a prune holding its lock does), under the same deadline as every statement."""
    loop = asyncio.get_running_loop()
    return await within_deadline(
        connection, lambda: _fetch(connection, query, params), deadline_seconds, loop
    )


async def within_deadline(
    connection: psycopg.AsyncConnection[Any],
    call: Callable[[], Awaitable[T]],
    deadline_seconds: float,
    loop: asyncio.AbstractEventLoop,
) -> T:
    """Run `call`; past the deadline, break the connection's socket and raise TimeoutError.

    Cancelling a psycopg query first waits (seconds) for the server to confirm the
    cancel, which a blackholed connection never does. Shutting the socket down makes
    the pending read fail at once; the pool then discards the broken connection.
    """
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        shut_socket(connection)

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


def shut_socket(connection: psycopg.AsyncConnection[Any]) -> None:
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

"""The sqlite file's one connection, owned by one thread: every call runs there, every
write in one BEGIN IMMEDIATE transaction, and sqlite's errors map into the error tree."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from noeta.backends.stores.sqlite.encoding import now_micros
from noeta.core.errors import CommitUnknown, PayloadError, StoreError, StoreUnavailable

_P = ParamSpec("_P")
_T = TypeVar("_T")


class SqliteConnection:
    """The connection a `SqliteStore` runs on; each concern's methods use it."""

    def __init__(
        self, path: str, connection: sqlite3.Connection, executor: ThreadPoolExecutor
    ) -> None:
        self._path = path
        self._connection = connection
        # One thread owns the connection: sqlite calls block, and must not block the loop.
        self._executor = executor
        self._closed = False

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
        except sqlite3.Error as error:
            raise store_error(error, self._path) from error

    def _write(self, body: Callable[[sqlite3.Connection, int], _T]) -> _T:
        """Run `body(connection, now)` in one BEGIN IMMEDIATE transaction."""
        with self._transaction() as connection:
            # Read the clock only once the write lock is held: the wait may have been long.
            return body(connection, now_micros())

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


# The file cannot take this work now, whatever the statement: another process held the
# write lock past the busy timeout (BUSY, LOCKED), the file or its directory is read-only
# (READONLY, CANTOPEN), the disk is full (FULL) or failing (IOERR), or memory ran out
# (NOMEM). Nothing was written; the same call will succeed once that passes.
_UNAVAILABLE_CODES = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_NOMEM,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN,
}


def store_error(error: sqlite3.Error, path: str) -> StoreError:
    """The store error a sqlite error means: StoreUnavailable for the conditions above
    (by primary result code), StoreError for the rest (a missing table, a bug)."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _UNAVAILABLE_CODES:
        return StoreUnavailable(f"sqlite store {path}: {error}")
    return StoreError(f"sqlite store {path}: {error}")


def connect(path: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    """Open the file with the settings every noeta connection to it uses."""
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

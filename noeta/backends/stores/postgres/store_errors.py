"""The store's error contract: what a driver error means to a caller (`store_error`),
and the reasons its messages give (never a password)."""

from __future__ import annotations

import re

import psycopg

from noeta.core.errors import (
    CommitUnknown,
    Conflict,
    NotStarted,
    PoolerRefused,
    StoreError,
    StoreUnavailable,
    UnknownTask,
)

# Deadlock and serialization failure: the statement was rolled back whole; re-run it.
_RETRYABLE = {"40P01", "40001"}
# The server cannot take this work now, whatever the statement: it is shutting down or
# starting (57P01-57P03), this session was ended (57P05), the database is read-only (a
# standby promoted away from, or default_transaction_read_only: 25006), or it is out of
# disk, memory or connections (class 53). Nothing was written; the same statement will
# succeed once the server is back, so callers wait and retry.
_UNAVAILABLE_STATES = {"57P01", "57P02", "57P03", "57P05", "25006"}
_UNAVAILABLE_CLASSES = {"08", "53"}
# PgBouncer's refusals of a client it has no server session for: at the first statement
# of a transaction, after its login to the server failed (`check_fast_fail`), or after
# waiting too long in its queue. It closes the client's connection as it refuses, but
# nothing of the round trip reached PostgreSQL (ADR-0155).
_POOLER_REFUSALS = ("server login has been failing", "query_wait_timeout")


class Rerun(StoreError):
    """A deadlock or serialization failure: rolled back whole, safe to run again."""


def store_error(
    error: psycopg.Error | TimeoutError,
    where: str,
    *,
    write: bool,
    broken: bool,
    task_id: str | None = None,
) -> StoreError:
    """The store error a driver error means: the one place the error contract is kept.

    | cause                                            | error            |
    | the fence refused the append (NT409)             | Conflict         |
    | no such task (NT404, a foreign key)              | UnknownTask      |
    | a task to create started is in a limited queue   | NotStarted       |
    |   (NT423)                                        |                  |
    | the connection broke, or no answer in time,      | CommitUnknown    |
    |   during a write (not for a pooler's refusal)    |                  |
    | the same during a read                           | StoreUnavailable |
    | PgBouncer found no server for it (ADR-0155)      | PoolerRefused    |
    | server shutting down or starting, session ended, | StoreUnavailable |
    |   read-only, out of disk / memory / connections  |                  |
    | anything else the server refused: statement or   | StoreError       |
    |   lock timeout, a missing grant, a missing table |                  |
    """
    if isinstance(error, psycopg.Error) and _refused_by_pooler(error):
        return PoolerRefused(f"PostgreSQL at {where} cannot take it now: {reason(error)}")
    if broken or not isinstance(error, psycopg.Error):
        if write:
            return CommitUnknown(
                f"lost the connection to PostgreSQL at {where} while a write was "
                "committing; it may or may not have landed"
            )
        return StoreUnavailable(f"lost the connection to PostgreSQL at {where}")
    state = error.sqlstate or ""
    if state == "NT409":
        return Conflict(task_id or "?", message(error))
    if state == "NT404":
        return UnknownTask(message(error))
    if state == "NT423":
        return NotStarted(message(error))
    if state == "23503":  # a foreign key: the row names a task that does not exist
        return UnknownTask(task_id or "?")
    if state in _RETRYABLE:
        return Rerun(f"PostgreSQL at {where}: {reason(error)} (SQLSTATE {state})")
    code = f" (SQLSTATE {state})" if state else ""
    if state in _UNAVAILABLE_STATES or state[:2] in _UNAVAILABLE_CLASSES:
        return StoreUnavailable(f"PostgreSQL at {where} cannot take it now: {reason(error)}{code}")
    # The server refused the statement, or the driver could not send it: nothing was
    # written, and it is the deployment's (or noeta's) to fix, or the statement ran too
    # long. A StoreError leaves the task for a later claim instead of failing it.
    return StoreError(f"PostgreSQL at {where} refused a statement: {reason(error)}{code}")


def _refused_by_pooler(error: psycopg.Error) -> bool:
    refusal = error.diag.message_primary or ""
    return error.sqlstate == "08P01" and refusal.startswith(_POOLER_REFUSALS)


def message(error: psycopg.Error) -> str:
    return error.diag.message_primary or str(error)


_LIBPQ_PREFIXES = re.compile(
    r"connection failed: "
    r'|connection to server at "[^"]*"(?: \([^)]*\))?, port \d+ failed: '
    r"|FATAL:\s+"
)


def reason(error: psycopg.Error) -> str:
    """The server's or libpq's reason, on one line (libpq never includes the password)."""
    lines = (error.diag.message_primary or str(error)).strip().splitlines()
    return _LIBPQ_PREFIXES.sub("", lines[0]).strip() if lines else type(error).__name__

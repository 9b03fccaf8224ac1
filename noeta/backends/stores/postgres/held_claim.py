"""An idle worker's lone claim, held open for its run's first write (ADR-0136): the claim's
transaction stays open while the run loads, folds and makes its first write, and that
write goes with the claim's COMMIT, so one WAL flush makes both durable.

The claim went as `BEGIN; SET LOCAL transaction_timeout; <claim>`, pipelined, on the
claims' connection. Then, whichever comes first:
- the run's first write (a write naming the task and the claim's epoch): sent in a
  savepoint with a COMMIT behind it (which releases the savepoint: no RELEASE is sent),
  pipelined, one round trip. Refused (the fence, a queue's limits, a deadlock), it is
  rolled back to its savepoint, the claim commits, and the write goes again as it would
  have without the hold: refused, or retried, as ever.
  Cut (the connection broken), the claim's outcome is unknown with the write's.
- `HOLD_SECONDS` pass: the claim commits alone, as every claim did before, and the run's
  write goes on the pool when it comes.
- the worker freezes: PostgreSQL ends the transaction after `TRANSACTION_TIMEOUT`, the
  claim never happened, and another worker claims the task.
Nothing says the task is claimed before the commit is acknowledged: `durable` says so.
A claim undone (or of unknown outcome) refuses every later write under its epoch here:
the rolled-back epoch is the next claimer's too, and the fence compares epochs alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from noeta.core.errors import CommitUnknown, Conflict, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

Rows = list[tuple[Any, ...]]
Statements = Sequence[tuple[str, Mapping[str, Any]]]
# Runs statements on the held connection, in one round trip, errors as the store's.
RunOn = Callable[[Any, Statements], Awaitable[list[Rows]]]
GiveBack = Callable[[Any], Awaitable[None]]

# How long the claim waits for its run's first write before it commits alone. A pickup's
# Python from the claim's rows to its first write takes 0.5 ms median, a few ms at p99 on a
# loaded machine (docs/scaling.md); a run that starts plugins, waits for a model limit or
# runs a hook takes longer and is not worth holding a row lock for.
HOLD_SECONDS = 0.02
# PostgreSQL ends the claim's transaction (and its session) this long after it began: a
# frozen worker (SIGSTOP, a debugger) holds the task's row no longer, and the claim never
# happened. transaction_timeout (PostgreSQL 17+), not idle_in_transaction_session_timeout:
# psycopg ends a pipeline with a Flush message after its Sync, and the server disarms the
# idle timer as it reads that message and arms it again only at the next Sync (measured:
# a session left idle in a pipelined BEGIN lived on; docs/scaling.md).
TRANSACTION_TIMEOUT = "2s"
HELD_SINCE = 170000  # the server version with transaction_timeout
Statement = tuple[str, Mapping[str, Any]]
BEGIN: tuple[Statement, ...] = (
    ("BEGIN", {}),
    (f"SET LOCAL transaction_timeout = '{TRANSACTION_TIMEOUT}'", {}),
)
_COMMIT: Statement = ("COMMIT", {})
# The first write in a savepoint: refused, it is rolled back alone and the claim commits.
# Written, the COMMIT behind it releases the savepoint with the rest: a RELEASE before it
# would be one statement more on the pickup's path (docs/scaling.md, "The idle agent
# pickup, stage by stage").
_SAVEPOINT: Statement = ("SAVEPOINT first_write", {})
_UNDO_WRITE: Statement = ("ROLLBACK TO SAVEPOINT first_write", {})


class HeldClaim:
    """One claim's open transaction on a connection of its own, until it is settled."""

    def __init__(
        self,
        connection: Any,
        task_id: str,
        epoch: int,
        run_on: RunOn,
        give_back: GiveBack,
        settled: Callable[[HeldClaim, bool], None],
    ) -> None:
        self.task_id, self.epoch = task_id, epoch
        self._connection: Any = connection
        self._run_on, self._give_back, self._settled = run_on, give_back, settled
        loop = asyncio.get_running_loop()
        self.durable: asyncio.Future[bool] = loop.create_future()
        self._timer = loop.call_later(HOLD_SECONDS, self._expire)
        self._alone: asyncio.Task[None] | None = None

    def _expire(self) -> None:
        """The run's first write did not come in time: commit the claim alone."""
        if self._connection is not None and self._alone is None:
            self._alone = asyncio.ensure_future(self.commit_alone())

    async def abandon(self) -> None:
        """The store closes: its connection closed, the server rolls the claim back."""
        self._timer.cancel()
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
        if not self.durable.done():
            self.durable.set_result(False)

    async def commit_alone(self) -> None:
        """Commit the claim by itself (the deadline, or a claim not worth holding)."""
        self._timer.cancel()
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            await self._run_on(connection, (_COMMIT,))
        except StoreError as error:
            log.warning("claim of task %s: its commit failed (%s); undone", self.task_id, error)
            await self._end(connection, committed=False)
            return
        await self._end(connection, committed=True)

    async def write(self, query: str, params: Mapping[str, Any]) -> Rows | None:
        """The run's first write, with the claim's COMMIT behind it: its rows once both are
        durable. None where the claim is committed without it: the write then goes as it
        would have without the hold (the claim committed alone before it came, or the
        write refused: rolled back to its savepoint, the claim committed, and the write
        sent again on the pool, to be refused or retried as ever). Raises where the
        connection broke (the claim's outcome unknown with the write's), or Conflict where
        the claim was undone before."""
        connection, self._connection = self._connection, None
        if connection is None:  # committed alone, or being committed: wait for its outcome
            if await asyncio.shield(self.durable):
                return None
            raise Conflict(self.task_id, "its claim was undone before it was durable")
        self._timer.cancel()
        statements = (_SAVEPOINT, (query, params), _COMMIT)
        try:
            _, written, *_ = await self._run_on(connection, statements)
        except (CommitUnknown, StoreUnavailable):  # cut, or the session ended: as a lost write
            await self._end(connection, committed=False)
            raise
        except StoreError:  # refused by the server, the session alive
            if not await self._commit_without_it(connection):
                raise
            return None
        except BaseException:
            await self._end(connection, committed=False)
            raise
        await self._end(connection, committed=True)
        return written

    async def _commit_without_it(self, connection: Any) -> bool:
        """The first write refused: roll it back to its savepoint and commit the claim."""
        try:
            await self._run_on(connection, (_UNDO_WRITE, _COMMIT))
        except StoreError:
            await self._end(connection, committed=False)
            return False
        await self._end(connection, committed=True)
        return True

    async def _end(self, connection: Any, *, committed: bool) -> None:
        if not committed and not connection.broken:
            # An aborted transaction block: ended before the pool takes it back (a
            # connection broken meanwhile is discarded).
            with contextlib.suppress(StoreError):
                await self._run_on(connection, (("ROLLBACK", {}),))
        await self._give_back(connection)
        self._settled(self, committed)  # before any later write of the run looks
        if not self.durable.done():
            self.durable.set_result(committed)

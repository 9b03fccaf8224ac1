"""A claim of agent tasks held open for its runs' first write (ADR-0136): the claim's
transaction stays open while the runs load, fold and make their first write, and that
write goes with the claim's COMMIT, so one WAL flush makes both durable. An idle worker's
claim of one task; a drain's claim of its next generation, whose runs' first writes go as
one group-commit round (ADR-0147): the first write or round naming any of its tasks
commits the claim of all of them.

The claim went as `BEGIN; <claim>`, pipelined, on the claims' connection, the claim's
statement setting its transaction's `transaction_timeout`. Then, whichever comes first:
- the run's first write (a write naming the task and the claim's epoch): sent in a
  savepoint with a COMMIT behind it, pipelined, one round trip. Refused (the fence, a
  queue's limits, a deadlock), it is rolled back to its savepoint, the claim commits, and
  the write goes again as it would have without the hold: refused, or retried, as ever.
  Cut (the connection broken), the claim's outcome is unknown with the write's. A
  drain's round of first writes goes with the COMMIT behind it and no savepoint (its
  statement refuses rows one by one); failed whole, the claim is undone with it.
- `HOLD_SECONDS` pass: the claim commits alone, as every claim did before, and the run's
  write goes on the pool when it comes.
- the worker freezes: PostgreSQL ends the transaction after
  `claim_sql.TRANSACTION_TIMEOUT`, the claim never happened, and another worker claims
  the task.
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

from noeta.backends.stores.postgres.group_commit import LeanAppend, batch_params
from noeta.core.errors import CommitUnknown, Conflict, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

Rows = list[tuple[Any, ...]]
Statements = Sequence[tuple[str, Mapping[str, Any]]]
# Runs statements on the held connection, in one round trip, errors as the store's.
RunOn = Callable[[Any, Statements], Awaitable[list[Rows]]]
GiveBack = Callable[[Any], Awaitable[None]]
# Sends a round's statement as any round goes (on the rounds' connections).
SendRound = Callable[[str, Mapping[str, Any]], Awaitable[Rows]]

# How long the claim waits for its run's first write before it commits alone. A pickup's
# Python from the claim's rows to its first write takes 0.5 ms median, a few ms at p99 on a
# loaded machine (docs/scaling.md); a run that starts plugins, waits for a model limit or
# runs a hook takes longer and is not worth holding a row lock for.
HOLD_SECONDS = 0.02
HELD_SINCE = 170000  # the server version with transaction_timeout
Statement = tuple[str, Mapping[str, Any]]
# The claim's statement bounds its own transaction (`claim_sql.TRANSACTION_TIMEOUT`).
BEGIN: Statement = ("BEGIN", {})
_COMMIT: Statement = ("COMMIT", {})
# The first write in a savepoint: refused, it is rolled back alone and the claim commits.
_SAVEPOINT: Statement = ("SAVEPOINT first_write", {})
_UNDO_WRITE: Statement = ("ROLLBACK TO SAVEPOINT first_write", {})
# A write's connection cut, or its session ended: the claim's outcome unknown with it.
_CUT = (CommitUnknown, StoreUnavailable)
UNDONE = "its claim was undone before it was durable"


class HeldClaim:
    """One claim's open transaction on a connection of its own, until it is settled: the
    claim of one task, or of several, whose runs' first writes share one round (ADR-0147)."""

    def __init__(
        self,
        connection: Any,
        epochs: Mapping[str, int],
        run_on: RunOn,
        give_back: GiveBack,
        settled: Callable[[HeldClaim, bool], None],
    ) -> None:
        self.epochs = epochs  # the tasks claimed, each at its claim's epoch
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
            tasks = ", ".join(self.epochs)
            log.warning("claim of task(s) %s: its commit failed (%s); undone", tasks, error)
            await self._end(connection, committed=False)
            return
        await self._end(connection, committed=True)

    @property
    def open(self) -> bool:
        """Its transaction still open, for a write to commit it."""
        return self._connection is not None

    @property
    def undone(self) -> bool:
        """Settled without its commit: its epoch writes nothing more from here."""
        return self.durable.done() and not self.durable.result()

    async def write(self, query: str, params: Mapping[str, Any], task_id: str) -> Rows | None:
        """Task `task_id`'s first write, with the claim's COMMIT behind it: its rows once
        both are durable. None where the claim is committed without it: the write then
        goes as it would have without the hold (the claim committed alone before it came,
        or the write refused: rolled back to its savepoint, the claim committed, and the
        write sent again on the pool, to be refused or retried as ever). Raises where the
        connection broke (the claim's outcome unknown with the write's), or Conflict where
        the claim was undone before."""
        connection, self._connection = self._connection, None
        if connection is None:  # committed alone, or being committed: wait for its outcome
            if await asyncio.shield(self.durable):
                return None
            raise Conflict(task_id, UNDONE)
        self._timer.cancel()
        # No RELEASE before the COMMIT: the COMMIT ends the savepoint with the transaction.
        try:
            _, written, _ = await self._send(connection, (_SAVEPOINT, (query, params), _COMMIT))
        except _CUT:  # settled by `_send`
            raise
        except StoreError:  # refused by the server, the session alive
            if not await self._commit_without_it(connection):
                raise
            return None
        return written

    async def write_round(self, query: str, params: Mapping[str, Any]) -> Rows | None:
        """A group-commit round carrying a write of this claim's tasks, with the claim's
        COMMIT behind it (ADR-0147): its rows once both are durable. No savepoint:
        `noeta_append_batch` refuses rows one by one, so the statement fails whole only
        for a deadlock or the like, and the claim is then undone with it. None where the
        round does not carry the claim (committed before it, or undone: the caller sends
        the round's other writes as any). Raises where the connection broke."""
        connection, self._connection = self._connection, None
        if connection is None:  # committed alone, or being committed: wait for its outcome
            await asyncio.shield(self.durable)
            return None
        self._timer.cancel()
        try:
            written, _ = await self._send(connection, ((query, params), _COMMIT))
        except _CUT:  # settled by `_send`
            raise
        except StoreError:  # refused whole, the session alive: the claim rolled back
            await self._end(connection, committed=False)
            return None
        return written

    async def outcome(self) -> bool:
        """Whether the claim committed, once it is settled (within `HOLD_SECONDS` of its
        claim where no write comes)."""
        return await asyncio.shield(self.durable)

    async def _send(self, connection: Any, statements: Statements) -> list[Rows]:
        """Statements ending in the claim's COMMIT; the claim settled by their outcome
        unless the server refused them (StoreError, the session alive: the caller's)."""
        try:
            results = await self._run_on(connection, statements)
        except _CUT:  # cut, or the session ended: as a lost write
            await self._end(connection, committed=False)
            raise
        except StoreError:
            raise
        except BaseException:
            await self._end(connection, committed=False)
            raise
        await self._end(connection, committed=True)
        return results

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


async def round_of_held(
    claims: Sequence[HeldClaim | None],
    items: Sequence[LeanAppend],
    query: str,
    params: Mapping[str, Any],
    send: SendRound,
) -> Rows | None:
    """A group-commit round of `items`, some of them tasks of claims held here (`claims`,
    item by item): carried by the open one, with its commit (ADR-0147). Else (None) it
    goes as any, once every such claim is settled. Wherever it goes, the writes of a
    claim undone are refused row by row, as the fence refuses (their epoch may be the
    next claimer's too), and the others sent without them."""
    carrier = None
    for held in dict.fromkeys(each for each in claims if each is not None):
        if carrier is None and held.open:
            carrier = held
        else:  # settled first: its rows must not wait on its locks, nor pass the fence
            await held.outcome()
    if carrier is not None:
        kept, sent = _without_undone(claims, items, params)
        written = await carrier.write_round(query, sent) if kept else None
        if written is not None:
            return _answers(written, kept, len(items))
    kept, sent = _without_undone(claims, items, params)  # the carrier undone since, too
    if len(kept) == len(items):
        return None
    return _answers(await send(query, sent) if kept else [], kept, len(items))


def _without_undone(
    claims: Sequence[HeldClaim | None], items: Sequence[LeanAppend], params: Mapping[str, Any]
) -> tuple[list[int], Mapping[str, Any]]:
    """The positions (from 1) of the items no undone claim holds, and the round of them."""
    kept = [at for at, held in enumerate(claims, 1) if held is None or not held.undone]
    if len(kept) == len(items):
        return kept, params
    return kept, batch_params([items[at - 1] for at in kept])


def _answers(rows: Rows, kept: Sequence[int], count: int) -> Rows:
    """A round's rows for the items sent (`kept`), as the round of all `count` answers
    them, the others refused: their claim was undone."""
    refused = [(at, None, "NT409", UNDONE) for at in range(1, count + 1) if at not in kept]
    return [(kept[row[0] - 1], *row[1:]) for row in rows] + refused

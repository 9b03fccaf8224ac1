"""Durable group commit (ADR-0086): the lean appends of a worker's concurrent runs share
one statement and one commit (`noeta_append_batch`); each run awaits the commit that
carries its write, and a row the fence refuses is refused to its run alone. A claim that
starts jobs and comes while a batch is in flight rides with the next one: the appends and
the claim go in one round trip and one commit (ADR-0116; a plain claim, of agent tasks,
goes alone, ADR-0140). A write that finds a round free waits out the
turn of the event loop it came in, and the writes of that turn go with it (ADR-0125),
unless its worker runs it alone (ADR-0135).
Two rounds may be in flight at once, each on its own connection (ADR-0128): the writes of
the runs one commit wakes go while the other round commits, not after it."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from noeta.core.errors import CommitUnknown, Conflict, StoreError, StoreUnavailable, UnknownTask
from noeta.core.ports.lone_run import lone_run

# Writes that arrive while every round is in flight go together as the next (natural
# batching: no timer, no added latency for a write that comes alone).
BATCH_CAP = 64
# Rounds in flight at once (ADR-0128): a batch or a lone write each. With one, the writes
# of the runs a commit wakes waited for the round in flight before their own went; with
# two they go at the end of their turn of the loop. A run has one write in flight at a
# time, so its writes keep their order whatever the rounds.
ROUNDS_IN_FLIGHT = 2

# Said to a run whose item the batch's committed answer left out (the function owes a row
# an item; a run must never wait on an answer that will not come).
UNANSWERED = "the batch carrying this write committed without saying whether it was written"

APPEND_BATCH = """
SELECT item, appended_seq, refusal_code, refusal_message
  FROM noeta_append_batch(%(items)s::jsonb)
"""


@dataclass(frozen=True)
class LeanAppend:
    """One run's lean append: events only, then keep running (`status` None) or finish.
    `model_keys` (a JSON array) marks a ModelCalled append, which goes alone where a
    model limit applies to it."""

    task_id: str
    epoch: int
    expected_seq: int
    events: str  # the jsonb array of [type, data], as `events_json` encodes it
    status: str | None = None
    model_keys: str | None = None


class _SendAlone:
    """The batch left this append out (a limit applies to the model call): send it alone."""


_SEND_ALONE = _SendAlone()
_Queued = tuple[LeanAppend, "asyncio.Future[int | _SendAlone]"]
Rows = list[tuple[Any, ...]]
RunBatch = Callable[[str, dict[str, Any]], Awaitable[Rows]]
# The batch and a claim, pipelined in one transaction: (the batch's rows, the claim's).
RunWithClaim = Callable[[dict[str, Any], str, dict[str, Any]], Awaitable[tuple[Rows, Rows]]]


@dataclass(frozen=True)
class _QueuedClaim:
    statement: str
    params: dict[str, Any]
    rows: asyncio.Future[Rows | _SendAlone]


class GroupCommit:
    """Coalesces concurrent lean appends on one event loop. A write that finds a round free
    goes at the end of the loop's turn, with the writes that came in that turn (alone, the
    statement it would be alone); writes that arrive while every round is in flight queue,
    and go as one batch (up to `BATCH_CAP`) the moment one is done."""

    def __init__(self, run_batch: RunBatch, run_with_claim: RunWithClaim | None = None) -> None:
        self._run_batch = run_batch
        self._run_with_claim = run_with_claim
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flying = 0  # rounds in flight, a gathering one included
        self._gathering = False  # a write waits out its turn, to lead the next round
        self._queued: list[_Queued] = []
        self._claim: _QueuedClaim | None = None
        self._senders: set[asyncio.Task[None]] = set()
        self.claims_carried = 0  # claims that shared a batch's round trip (tests read it)

    async def append(self, item: LeanAppend, alone: Callable[[], Awaitable[int]]) -> int:
        """The appended seq, once the commit carrying `item` is durable; `alone` is the
        statement the append is when it goes by itself."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        if loop is not self._loop:  # a store used from a second loop: nothing to share
            return await alone()
        busy = self._gathering or self._flying >= ROUNDS_IN_FLIGHT
        if not busy and lone_run():  # its worker's only run: none can come (ADR-0135)
            self._flying += 1
            return await self._alone(alone)
        queued: _Queued = (item, loop.create_future())
        if busy:
            self._queued.append(queued)
        else:
            # The runs a commit wakes (or a claim starts) write in the same turn of the
            # loop: the first that finds a round free waits that turn out, so they share
            # one commit rather than the first going alone and the rest after it
            # (ADR-0125). Its round is taken meanwhile: those that come queue behind it.
            self._gathering = True
            self._flying += 1
            try:
                await asyncio.sleep(0)
            except BaseException:
                self._gathered()
                raise
            if not self._queued:  # none came: the statement it is alone
                self._gathering = False
                return await self._alone(alone)
            self._queued.insert(0, queued)  # it leads the batch of those that came
            self._gathered()
        try:
            outcome = await queued[1]
        except asyncio.CancelledError:
            if queued in self._queued:  # not sent: it never will be
                self._queued.remove(queued)
            raise
        if isinstance(outcome, _SendAlone):
            return await alone()
        return outcome

    async def _alone(self, alone: Callable[[], Awaitable[int]]) -> int:
        """A write in a round of its own, `alone` (the round taken by the caller)."""
        try:
            return await alone()
        finally:
            self._flying -= 1
            self._send_queued()

    def _gathered(self) -> None:
        """The gathering write's turn is out: its round goes to the writes queued."""
        self._gathering = False
        self._flying -= 1
        self._send_queued()

    async def claim(
        self, statement: str, params: dict[str, Any], alone: Callable[[], Awaitable[Rows]]
    ) -> Rows:
        """The claim's rows, once durable. While appends are queued for the next round, the
        claim goes with them, in one round trip and one commit (ADR-0116): a worker's
        finishes and its next claim. Otherwise it goes alone (`alone`), at once, beside
        the rounds in flight: with nothing to share, a wait would only serialise them."""
        loop = asyncio.get_running_loop()
        riding = bool(self._queued) and self._claim is None and loop is self._loop
        if not riding or self._run_with_claim is None:
            return await alone()
        waiting = _QueuedClaim(statement, params, loop.create_future())
        self._claim = waiting
        try:
            outcome = await waiting.rows
        except asyncio.CancelledError:
            if self._claim is waiting:  # not sent: it never will be
                self._claim = None
            raise
        if isinstance(outcome, _SendAlone):
            return await alone()
        return outcome

    def _send_queued(self) -> None:
        """Start a round for the writes queued, while a round is free (none while a write
        gathers its turn's: they are its); the claim waiting rides with the first."""
        while self._queued and not self._gathering and self._flying < ROUNDS_IN_FLIGHT:
            assert self._loop is not None
            batch, self._queued = self._queued[:BATCH_CAP], self._queued[BATCH_CAP:]
            claim, self._claim = self._claim, None
            self._flying += 1
            sender = self._loop.create_task(self._send(batch, claim))
            self._senders.add(sender)  # a reference, or the loop may collect it mid-flight
            sender.add_done_callback(self._senders.discard)
        if not self._queued and self._claim is not None:  # nothing to ride with: alone, now
            claim, self._claim = self._claim, None
            _settle(claim.rows, _SEND_ALONE)

    async def _send(self, batch: list[_Queued], claim: _QueuedClaim | None = None) -> None:
        params = batch_params([item for item, _ in batch])
        try:
            if claim is None:
                rows = await self._run_batch(APPEND_BATCH, params)
            else:
                assert self._run_with_claim is not None
                rows, claimed = await self._run_with_claim(params, claim.statement, claim.params)
                self.claims_carried += 1
                _settle(claim.rows, claimed)
        except (CommitUnknown, StoreUnavailable) as error:
            # Cut, or never taken: every run in it gets what a lone write gets.
            for future in _futures(batch, claim):
                _settle(future, error=_own_copy(error))
        except StoreError as error:
            if claim is None:  # the statement failed whole: each run is told, as alone
                for _, future in batch:
                    _settle(future, error=_own_copy(error))
            else:  # refused, so nothing of it committed: each goes alone, to its own end
                for future in _futures(batch, claim):
                    _settle(future, _SEND_ALONE)
        except BaseException:
            for future in _futures(batch, claim):  # cancelled mid-statement (store closing)
                _settle(future, error=CommitUnknown("the batch carrying this write was cut"))
            raise
        else:
            by_item = {row[0]: row[1:] for row in rows}
            for position, (item, future) in enumerate(batch, start=1):
                answer = by_item.get(position)
                if answer is None:  # committed without a word on it: never left waiting
                    _settle(future, error=CommitUnknown(UNANSWERED))
                    continue
                _settle(future, **_outcome(item, *answer))
        finally:
            self._flying -= 1
            self._send_queued()


def batch_params(items: Sequence[LeanAppend]) -> dict[str, Any]:
    """The one JSON array `noeta_append_batch` takes, in the items' order. Its parts are
    JSON already (the events, the model keys) and joined as text: a parameter of arrays
    of texts would have psycopg escape every quote of every event in Python."""
    parts = []
    for item in items:
        part = (
            f'{{"task":{_JSON(item.task_id)},"epoch":{item.epoch:d},'
            f'"expected_seq":{item.expected_seq:d},"events":{item.events}'
        )
        if item.status is not None:
            part += f',"status":{_JSON(item.status)}'
        if item.model_keys is not None:
            part += f',"model_keys":{item.model_keys}'
        parts.append(part + "}")
    return {"items": "[" + ",".join(parts) + "]"}


_JSON = json.JSONEncoder(ensure_ascii=True).encode


def _outcome(item: LeanAppend, seq: int | None, code: str | None, reason: str | None) -> Any:
    if code is None:
        assert seq is not None
        return {"result": seq}
    if code == "limited":
        return {"result": _SEND_ALONE}
    if code == "NT404":
        return {"error": UnknownTask(reason or item.task_id)}
    return {"error": Conflict(item.task_id, reason or code)}


def _futures(batch: list[_Queued], claim: _QueuedClaim | None) -> list[asyncio.Future[Any]]:
    futures: list[asyncio.Future[Any]] = [future for _, future in batch]
    return futures if claim is None else [*futures, claim.rows]


def _settle(
    future: asyncio.Future[Any],
    result: object = None,
    error: BaseException | None = None,
) -> None:
    if future.done():  # its run was cancelled while the batch was in flight
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert result is not None
        future.set_result(result)


def _own_copy(error: StoreError) -> StoreError:
    """Each run raises its own exception object (a shared one would collect every run's
    traceback)."""
    try:
        return copy.copy(error)
    except TypeError:
        return error

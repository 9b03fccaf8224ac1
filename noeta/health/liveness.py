"""Liveness: each loop a process runs says when it turned and how long it may wait before
its next turn; one that overruns that by more than a bound is stuck (GET /livez)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

# A loop is stuck once it has overrun its own announced wait by this much: more than a
# store statement's deadline (10 s), so a slow store is not a dead process.
DEFAULT_STUCK_AFTER = 60.0
EVENT_LOOP = "event loop"
EVENT_LOOP_SECONDS = 1.0  # the event loop's own turn: a task that only sleeps


@dataclass(frozen=True, slots=True)
class Turn:
    at_wall: float  # time.time() of the turn, for people
    at: float  # the monotonic clock's, for the bound
    wait: float | None  # the longest wait announced before the next turn; None: any


@dataclass(frozen=True, slots=True)
class LoopState:
    name: str
    last_turn: datetime
    seconds_ago: float
    stuck: bool


class Liveness:
    """The loops of one process; written on the event loop, read by the health thread."""

    def __init__(
        self,
        stuck_after: float = DEFAULT_STUCK_AFTER,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stuck_after = stuck_after
        self.monotonic = monotonic
        self._turns: dict[str, Turn] = {}
        self._lock = threading.Lock()

    def turned(self, loop: str, wait: float | None = 0.0) -> None:
        """`loop` turned now and may wait up to `wait` seconds for its next turn (None:
        it waits for something that may rightly take any time, such as a free slot)."""
        turn = Turn(time.time(), self.monotonic(), wait)
        with self._lock:
            self._turns[loop] = turn

    def forget(self, loop: str) -> None:
        """`loop` ended on purpose (the process is stopping): no longer judged."""
        with self._lock:
            self._turns.pop(loop, None)

    def states(self) -> list[LoopState]:
        now = self.monotonic()
        with self._lock:
            turns = sorted(self._turns.items())
        return [
            LoopState(
                name,
                datetime.fromtimestamp(turn.at_wall, UTC),
                max(0.0, now - turn.at),
                turn.wait is not None and now - turn.at > turn.wait + self.stuck_after,
            )
            for name, turn in turns
        ]

    async def beat_event_loop(self) -> None:
        """Turn with the event loop until cancelled: a loop blocked by a synchronous call
        stops turning, whatever the other loops last said."""
        while True:
            self.turned(EVENT_LOOP, EVENT_LOOP_SECONDS)
            await asyncio.sleep(EVENT_LOOP_SECONDS)

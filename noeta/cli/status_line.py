"""The live status line on a terminal's stderr: drawn in place (\\r, clear to the end of
the line), cut to the terminal's width, redrawn a few times a second while a time ticks,
and cleared before anything else is printed. Off stderr's terminal it is `NoStatus`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import replace
from typing import Any, TextIO, TypeVar

import click

from noeta.cli.progress import TaskProgress, Written, fit
from noeta.core.ports.store import Claim, NewEvent, NewTask, Store
from noeta.core.ports.store_capabilities import StoreCapabilities
from noeta.core.retry import MODEL_RETRY_ATTRIBUTE, ModelRetry
from noeta.core.rules import events as ev

TICK_SECONDS = 0.125  # redraws of a ticking time: 8 a second, from memory, no store read
CLEAR = "\r\x1b[K"  # to the line's start, then erase to its end
DEFAULT_COLUMNS = 80
T = TypeVar("T")
log = logging.getLogger(__name__)


class NoStatus:
    """No status line (stderr is not a terminal, or it was turned off): output as is."""

    live = False

    def add(self, written: Written, *, above: str | None = None) -> None:
        """One more event of the task's log; `above`, a line of output to print for it."""
        if above is not None:
            click.echo(above)

    def close(self) -> None:
        return None

    def off(self) -> None:
        return None

    def hold(self, held: bool) -> None:
        """While held, the line is not drawn (a line of streamed text is open above)."""
        return None

    def follow(self, store: Store) -> Store:
        """`store`, or one whose writes the line follows (`noeta run`)."""
        return store

    async def showing(self, running: Awaitable[T]) -> T:
        """Await `running` with the line shown (see `shown`): `noeta run` around its run."""
        async with shown(self):
            return await running


class StatusLine(NoStatus, logging.Handler):
    """The line for one task on `stream`; also the handler of noeta's log records while it
    is shown, so a warning prints above the line instead of through it."""

    live = True

    def __init__(self, progress: TaskProgress, stream: TextIO, *, at_once: bool) -> None:
        NoStatus.__init__(self)
        logging.Handler.__init__(self, logging.WARNING)
        self.progress: TaskProgress | None = progress  # None: off
        self.stream = stream
        # Each event drawn as it comes (`noeta run`: they are live), or the latest at the
        # next tick (`noeta tail`: a log read back in bulk would flash its past by).
        self.at_once = at_once
        self.changed = False
        self.drawn = ""  # the line on the terminal now ("" when cleared)
        self.drawing = threading.RLock()  # a log record from another thread draws too
        self.held = False

    def add(self, written: Written, *, above: str | None = None) -> None:
        if above is not None:
            self.clear()
            click.echo(above)
            sys.stdout.flush()  # on the terminal before the line is drawn under it
        if self.progress is None:
            return
        try:
            self.progress.add(written)
        except Exception:  # a courtesy must not fail the command (nor, in `run`, an append)
            log.debug("the status line stops", exc_info=True)
            self.off()
            return
        if self.at_once:
            self.draw()
        else:
            self.changed = True

    def off(self) -> None:
        """Stop drawing (erasing the line): what it would say can no longer be trusted."""
        self.clear()
        self.progress = None

    def hold(self, held: bool) -> None:
        if held:
            self.clear()
        self.held = held
        if not held:
            self.draw()

    def draw(self) -> None:
        if self.progress is None or self.held:
            return
        line = fit(self.progress.line(), _columns(self.stream) - 1)  # the last cell wraps
        with self.drawing:
            if line != self.drawn:  # the same words again: nothing to write
                self.stream.write(CLEAR + line)
                self.stream.flush()
                self.drawn = line

    def clear(self) -> None:
        with self.drawing:
            if self.drawn:
                self.stream.write(CLEAR)
                self.stream.flush()
                self.drawn = ""

    def emit(self, record: logging.LogRecord) -> None:
        retry = getattr(record, MODEL_RETRY_ATTRIBUTE, None)
        if isinstance(retry, ModelRetry) and self.progress is not None:
            self.progress.retried(retry)  # the line says it, with its countdown
        else:
            self.clear()
            self.stream.write(self.format(record) + "\n")
        self.draw()

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            if self.changed or (self.progress is not None and self.progress.ticking):
                self.changed = False
                self.draw()

    def close(self) -> None:
        self.clear()
        logging.Handler.close(self)

    def follow(self, store: Store) -> Store:
        return FollowedStore(store, self)


def open_status(enabled: bool, *, at_once: bool) -> NoStatus:
    """A status line for a task on stderr if `enabled` and stderr is a terminal;
    `at_once`: drawn at each event, not only at the next tick."""
    # A dumb terminal cannot erase a line: each state would pile up below the last.
    if not enabled or not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        return NoStatus()
    return StatusLine(TaskProgress(), sys.stderr, at_once=at_once)


@contextlib.asynccontextmanager
async def shown(status: NoStatus) -> AsyncIterator[None]:
    """While inside: the line ticks, and noeta's warnings print above it. Cleared after."""
    if not isinstance(status, StatusLine):
        yield
        return
    logger = logging.getLogger("noeta")
    logger.addHandler(status)
    ticking = asyncio.create_task(status.tick())
    try:
        yield
    finally:
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
        logger.removeHandler(status)
        status.close()


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or DEFAULT_COLUMNS
    except (OSError, ValueError):
        return DEFAULT_COLUMNS


class FollowedStore:
    """The store `noeta run` runs its task through: each event written (the task's first
    ones, then every append) goes to the status line as it is acknowledged, so the line
    follows the log without reading it back. Everything else passes through."""

    def __init__(self, inner: Store, status: NoStatus) -> None:
        self.inner = inner
        self.status = status

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def capabilities(self) -> StoreCapabilities:
        """The inner store's; its model-limited appends come here, to be shown."""
        inner = self.inner.capabilities
        return inner if inner.model_limits is None else replace(inner, model_limits=self)

    async def create_task(self, task: NewTask) -> bool:
        created = await self.inner.create_task(task)
        if created:
            self._show(0, task.events, 0)
        return created

    async def append(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], **options: Any
    ) -> int:
        last = await self.inner.append(claim, expected_seq, events, **options)
        self._show(expected_seq, events, claim.epoch)
        return last

    async def append_model_called(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], budget: Any
    ) -> int:
        """The ModelCalled append within the shared limits (ADR-0075), shown the same."""
        limiter = self.inner.capabilities.model_limits
        assert limiter is not None  # `capabilities` offers this only then
        last = await limiter.append_model_called(claim, expected_seq, events, budget)
        self._show(expected_seq, events, claim.epoch)
        return last

    def _show(self, after: int, written: Sequence[NewEvent], epoch: int) -> None:
        for offset, event in enumerate(written, start=1):
            try:
                decoded = ev.decode(event.type, event.data)
            except ValueError:  # the append landed all the same: only the line stops
                self.status.off()
                return
            self.status.add(Written(after + offset, decoded, epoch=epoch))

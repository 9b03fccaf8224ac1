"""The client's canvas call (ADR-0104): a chain, group or chord submitted as one task whose
handle's result is the canvas's; a part of `AsyncClient` (and `Client`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from noeta.client.canvas import Canvas, canvas_task
from noeta.client.creating import create_once
from noeta.client.handles import TaskHandle
from noeta.client.submissions import new_id
from noeta.core.ports.store import DEFAULT_QUEUE, Store

if TYPE_CHECKING:
    from noeta.config import Config


class CanvasCalls:
    """What `AsyncClient` offers for canvases; it supplies `store()` and `_config`."""

    _config: str | Config | None

    async def store(self) -> Store:
        raise NotImplementedError

    async def canvas(
        self, canvas: Canvas, *, queue: str | None = None, id: str | None = None
    ) -> TaskHandle:
        """Submit a chain, group or chord (or one signature) as one durable task, its
        members its subtasks. Every member is checked first (CanvasRefused names it;
        nothing is written). The handle's result (`job_result`, a Client's `get()`) is
        the canvas's: a chain's last result, a group's list in order, a chord's callback's.
        Raises TaskFailed with the failed member's error unless it ignores errors."""
        task = canvas_task(canvas, new_id(id), queue or DEFAULT_QUEUE, self._config)
        await create_once(await self.store(), task)
        return TaskHandle(task.id, task.queue)

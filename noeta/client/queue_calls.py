"""The client's queue settings (ADR-0073): a queue's limits set, cleared and shown through
the store's queue-settings port; a part of `AsyncClient` (and so of `Client`)."""

from __future__ import annotations

from noeta.core.ports.queue_settings import (
    QueueChange,
    QueueOverview,
    Rate,
    parse_rate,
    queue_settings_store,
)
from noeta.core.ports.store import Store


class QueueSettingsCalls:
    """What `AsyncClient` offers for queue limits; it supplies `store()`."""

    async def store(self) -> Store:
        raise NotImplementedError

    async def set_queue(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        per_key: int | None = None,
        rate: str | Rate | None = None,
        paused: bool | None = None,
    ) -> QueueOverview:
        """Change `queue`'s limits (None: unchanged); `rate` as 'N/PERIOD' (10/s, 600/m).
        Every worker obeys them from its next claim."""
        change = QueueChange(
            concurrency, per_key, parse_rate(rate) if isinstance(rate, str) else rate, paused
        )
        return await queue_settings_store(await self.store()).set_queue(queue, change)

    async def clear_queue(self, queue: str) -> bool:
        """Remove `queue`'s limits; False if it had none."""
        return await queue_settings_store(await self.store()).clear_queue(queue)

    async def queues(self, *names: str) -> list[QueueOverview]:
        """Every queue with settings or tasks (or those named): settings, claimable,
        running, running per key, waiting for a slot, scheduled later."""
        return await queue_settings_store(await self.store()).queue_overview(names)

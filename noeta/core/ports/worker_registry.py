"""The live workers: what each serves and offers, kept by its periodic round, so a task
that needs a plugin no live worker offers can say so (ADR-0092). Issue 31 grows it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# Tasks failed per round by a worker's `--unrunnable-after`: a backlog goes over rounds.
OVERDUE_BATCH = 10


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One worker as the registry holds it; `offers` None: it runs anything."""

    id: str
    queues: tuple[str, ...]
    offers: tuple[str, ...] | None
    last_seen: datetime | None = None  # the store's clock; None before it is recorded


class WorkerRegistry(Protocol):
    async def record_worker(self, worker: WorkerEntry, lease_seconds: float) -> None:
        """Insert or refresh the worker's row, live for `lease_seconds` from now."""
        ...

    async def remove_worker(self, worker_id: str) -> None:
        """The worker stops: it offers nothing from now on."""
        ...

    async def live_workers(self) -> list[WorkerEntry]:
        """Every worker whose row has not expired, by id."""
        ...

    async def unrunnable(self, task_ids: Sequence[str]) -> Mapping[str, tuple[str, ...]]:
        """Of these tasks, those ready or waiting whose needs no one live worker serving
        their queue offers, each with its needs (a task missing: any worker can run it)."""
        ...

    async def overdue(self, queues: Sequence[str], seconds: float) -> list[str]:
        """Up to OVERDUE_BATCH tasks of `queues`, due for more than `seconds`, that no
        live worker serving their queue can run: the due longest first."""
        ...


def no_worker_offers(needs: tuple[str, ...]) -> str:
    """What a task that no live worker can run is waiting for, in the operator's words."""
    return "no worker offers " + ", ".join(needs)

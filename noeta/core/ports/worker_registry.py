"""The registry of workers: who runs where, what each serves and offers, its counts, kept
by its periodic round (ADR-0092, ADR-0100); a task that needs a plugin no live worker
offers can say so, and an operator sees live, dead and stopped workers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, cast

# Tasks failed per round by a worker's `--unrunnable-after`: a backlog goes over rounds.
OVERDUE_BATCH = 10
# How long a dead or stopped worker's row stays listed (`noeta workers --all`) before
# another worker's round deletes it.
KEPT_AFTER_LEAVING_SECONDS = 3600.0

# live: its row's lease runs; dead: it went silent past its lease; stopped: it said so.
WorkerState = Literal["live", "dead", "stopped"]


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One worker as the registry holds it; `offers` None: it runs anything. The fields
    after `offers` are what a worker reports of itself; the store's clock fills the times."""

    id: str
    queues: tuple[str, ...]
    offers: tuple[str, ...] | None
    last_seen: datetime | None = None  # the store's clock; None before it is recorded
    host: str = ""
    pid: int = 0
    version: str = ""
    concurrency: int = 0
    # This run of the worker (drawn at its start): the name it holds is refused to any
    # other run while this one's row is live.
    instance: str = ""
    processed: int = 0  # tasks it brought to an end (done, failed or cancelled)
    failed: int = 0  # of them, failed
    started_at: datetime | None = None
    expires_at: datetime | None = None
    state: WorkerState = "live"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What recording a worker's row found before it wrote."""

    # The name is held by another live worker's run: nothing was written.
    held_by: WorkerEntry | None = None
    # This run's row was dead (silent past its lease) or stopped: it is live again.
    revived_from: WorkerState | None = None
    last_seen: datetime | None = None  # the row's last sighting before this one
    clock: datetime | None = None  # the store's, when the name was refused


class WorkerRegistry(Protocol):
    async def record_worker(
        self,
        worker: WorkerEntry,
        lease_seconds: float,
        departed_kept_seconds: float = KEPT_AFTER_LEAVING_SECONDS,
    ) -> Heartbeat:
        """Insert or refresh the worker's row, live for `lease_seconds` from now, unless
        another run's live row holds the name (then nothing is written). The same
        statement deletes the other rows that left more than `departed_kept_seconds` ago."""
        ...

    async def worker_stopped(self, worker: WorkerEntry) -> None:
        """The worker stops: it offers nothing from now on; its row, with its last counts,
        is listed as stopped for a while (nothing if another run holds the name)."""
        ...

    async def live_workers(self) -> list[WorkerEntry]:
        """Every worker whose row has not expired, by id."""
        ...

    async def listed_workers(self, departed: bool = False) -> list[WorkerEntry]:
        """The live workers by id, each with its state; with `departed`, the dead and
        stopped ones still kept as well."""
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


def name_taken(name: str, holder: WorkerEntry, seconds_ago: float) -> str:
    """Why a worker may not take `name`, in one line."""
    return (
        f"worker name {name!r} is held by a live worker (pid {holder.pid} on "
        f"{holder.host or 'an unknown host'}, last seen {seconds_ago:.1f} s ago): "
        "give another --name, or stop that worker first"
    )


def heartbeat(
    worker: WorkerEntry,
    recorded: bool,
    instance: str | None,
    previous: tuple[str | None, int | None, datetime | None, bool | None, bool | None],
    clock: datetime,
) -> Heartbeat:
    """What a round found, from the row as it was (`instance` None: there was none): its
    host, pid, last sighting, whether it was stopped and whether it was live; `clock`:
    the store's, then."""
    host, pid, seen, stopped, live = previous
    if not recorded:  # a live row of another run (None: one inserted at the same moment)
        holder = WorkerEntry(worker.id, (), None, seen, host or "", pid or 0)
        holder = dataclasses.replace(holder, instance=instance or "")
        return Heartbeat(held_by=holder, clock=clock)
    if instance is None or instance != worker.instance or live:
        return Heartbeat()
    return Heartbeat(revived_from="stopped" if stopped else "dead", last_seen=seen)


def reported(worker: WorkerEntry) -> dict[str, Any]:
    """What a worker says of itself, by column: the stores bind it as it is."""
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "version": worker.version,
        "concurrency": worker.concurrency,
        "instance": worker.instance,
        "processed": worker.processed,
        "failed": worker.failed,
    }


def listed(
    known: tuple[str, tuple[str, ...], tuple[str, ...] | None],
    reported_values: Sequence[Any],
    times: tuple[datetime, datetime, datetime],
    state: str,
) -> WorkerEntry:
    """A listed row as an entry: its id, queues and offers; what the worker reported, in
    `reported`'s order; its last sighting, start and expiry; its state."""
    host, pid, version, concurrency, instance, processed, failed = reported_values
    seen, started, expires = times
    assert state in ("live", "dead", "stopped")
    return WorkerEntry(
        *known,
        last_seen=seen,
        host=host,
        pid=pid,
        version=version,
        concurrency=concurrency,
        instance=instance,
        processed=processed,
        failed=failed,
        started_at=started,
        expires_at=expires,
        state=cast("WorkerState", state),
    )

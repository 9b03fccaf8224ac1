"""The fleet as an operator reads it (issue 31 item 1, ADR-0100): each worker in the
registry with the tasks it holds now, and the holders no live row names; read by
`noeta workers` and the web view's workers page."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from noeta.core.errors import ConfigError
from noeta.core.ports.store import Store
from noeta.core.ports.store_views import MAX_PAGE, HeldClaim
from noeta.core.ports.worker_registry import WorkerEntry


@dataclass(frozen=True, slots=True)
class FleetWorker:
    worker: WorkerEntry
    held: tuple[HeldClaim, ...]  # the tasks its name holds now (running or holding)


@dataclass(frozen=True, slots=True)
class Fleet:
    clock: datetime  # the store's, when it was read
    workers: list[FleetWorker]  # the live first, then (if asked) the dead and stopped
    # Tasks held by a name no listed row has: a worker of a version before the registry,
    # `noeta run`, or (without `departed`) a worker that died holding them.
    unlisted: dict[str, tuple[HeldClaim, ...]]
    held_capped: bool  # MAX_PAGE held tasks were read: there may be more


async def read_fleet(store: Store, departed: bool = False) -> Fleet:
    """The registry's workers (with `departed`: the recently dead and stopped too) and
    what each holds, as the store sees them now."""
    registry, views = store.capabilities.workers, store.capabilities.views
    if registry is None or views is None:
        raise ConfigError("this store keeps no registry of workers")
    workers = await registry.listed_workers(departed)
    held = await views.held_claims(MAX_PAGE)
    clock = await store.clock()
    by_owner: dict[str, list[HeldClaim]] = defaultdict(list)
    for claim in held:
        by_owner[claim.owner].append(claim)
    listed = [FleetWorker(w, tuple(by_owner.get(w.id, ()))) for w in workers]
    names = {w.id for w in workers}
    unlisted = {owner: tuple(c) for owner, c in sorted(by_owner.items()) if owner not in names}
    return Fleet(clock, listed, unlisted, len(held) == MAX_PAGE)


def seen_ago(worker: WorkerEntry, clock: datetime) -> str:
    """How long ago the worker was last seen, in the unit that reads best."""
    if worker.last_seen is None:
        return "never"
    seconds = max(0.0, (clock - worker.last_seen).total_seconds())
    if seconds < 120:
        return f"{seconds:.1f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"

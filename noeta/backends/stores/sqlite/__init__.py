"""The sqlite task store: one file that several processes on one machine can share.
`SqliteStore` is composed of one class per concern, each beside its SQL.

Every write is one BEGIN IMMEDIATE transaction with its checks inside; the checks and
writes mirror the functions in `queue/postgres/functions/` step for step.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from noeta.backends.stores.job_starts import start_events
from noeta.backends.stores.sqlite.appends import SqliteAppends
from noeta.backends.stores.sqlite.bulk import SqliteBulk
from noeta.backends.stores.sqlite.claims import SqliteClaims
from noeta.backends.stores.sqlite.connection import connect
from noeta.backends.stores.sqlite.cron import SqliteCron
from noeta.backends.stores.sqlite.fleet_budgets import SqliteFleetBudgets
from noeta.backends.stores.sqlite.late_results import SqliteLateResults
from noeta.backends.stores.sqlite.logs import SqliteLogs
from noeta.backends.stores.sqlite.model_limits import SqliteModelLimits
from noeta.backends.stores.sqlite.queues import SqliteQueues
from noeta.backends.stores.sqlite.schema import SqliteSchema
from noeta.backends.stores.sqlite.task_pruning import SqliteTaskPruning
from noeta.backends.stores.sqlite.unique_jobs import SqliteUniqueJobs
from noeta.backends.stores.sqlite.views import SqliteViews
from noeta.backends.stores.sqlite.workers import SqliteWorkers
from noeta.core.errors import ConfigError, StoreError, StoreUnavailable
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    Continue,
    Delivery,
    JobStarts,
    KnownLog,
    LoadedTask,
    NewEvent,
    NextState,
    check_claim_limit,
)
from noeta.core.ports.store_capabilities import StoreCapabilities

__all__ = ["SqliteStore"]

_MINIMUM_SQLITE = (3, 24, 0)  # ON CONFLICT ... DO NOTHING / DO UPDATE


class SqliteStore(
    SqliteClaims,
    SqliteAppends,
    SqliteLogs,
    SqliteCron,
    SqliteLateResults,
    SqliteSchema,
    SqliteBulk,
    SqliteUniqueJobs,
    SqliteTaskPruning,
    SqliteViews,
    SqliteModelLimits,
    SqliteFleetBudgets,
    SqliteQueues,
    SqliteWorkers,
):
    """The `Store` on one sqlite file. Open it with `await SqliteStore.open(path)`."""

    @functools.cached_property  # asked per append and per model call
    def capabilities(self) -> StoreCapabilities:
        """No bursts on one connection and no announcements: a waiter polls."""
        return StoreCapabilities(
            bulk=self,
            queue_settings=self,
            views=self,
            pruning=self,
            model_limits=self,
            workers=self,
            unique_jobs=self,
            append_and_claim=self,
        )

    async def append_and_claim(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        deliveries: Sequence[Delivery] = (),
        next_state: NextState = Continue(),
        then: ClaimAfter,
    ) -> tuple[int, ClaimedTask | None]:
        """The append, then the named claim (ADR-0121): sqlite has no round trip to save,
        and a claim right after the append's commit finds what one inside it would. Told
        the log the claimer holds (`then.known`), it reads only what came after it
        where that is the truth (ADR-0122)."""
        last_seq = await self.append(
            claim, expected_seq, events, deliveries=deliveries, next_state=next_state
        )
        try:
            found = await self.claim_and_load(
                then.worker,
                then.queues,
                then.lease_seconds,
                snapshot_version=then.snapshot_version,
                excluding=then.excluding,
                offers=then.offers,
                job_starts=then.job_starts,
                only=(then.task_id,),
                known=then.known,
            )
        except StoreError:
            return last_seq, None  # left claimable, as any task
        return last_seq, found[0] if found else None

    async def claim_and_load(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        limit: int = 1,
        snapshot_version: str,
        excluding: Collection[str] = (),
        offers: Collection[str] | None = None,
        job_starts: JobStarts | None = None,
        only: Collection[str] | None = None,
        hold: bool = False,  # one transaction is one commit here: nothing to hold
        ahead: bool = False,
        known: KnownLog | None = None,
    ) -> list[ClaimedTask]:
        """One claim after another, each read after it: sqlite has one writer at a time
        and no round trip to save. A claim already made is never dropped: past the first,
        a store error ends the batch, and a failed read leaves the task to its claimer.
        A fresh job is started (`job_starts`) by a fenced append right after its claim.
        `known` (append_and_claim's): the log the claimer holds of one task. Nothing is
        claimed `ahead`: with no round trip, a claim ahead saves nothing here."""
        check_claim_limit(limit)
        if ahead:
            return []
        claimed: list[ClaimedTask] = []
        for _ in range(limit):
            try:
                claim = await self.claim(
                    worker, queues, lease_seconds, excluding=excluding, offers=offers, only=only
                )
            except StoreError:
                if not claimed:
                    raise
                break
            if claim is None:
                break
            loaded: LoadedTask | None
            try:
                loaded = await self._load_claimed(claim, snapshot_version, known)
            except StoreError:
                loaded = None
            if loaded is not None and job_starts is not None and not claim.taken_over:
                loaded = await self._start_job(claim, loaded, job_starts, snapshot_version)
            claimed.append(ClaimedTask(claim, loaded))
        return claimed

    async def _load_claimed(self, claim: Claim, version: str, known: KnownLog | None) -> LoadedTask:
        """The task as its claimer reads it: only the log after `known`'s seq where the
        claim is the one right after `known`'s and the log reaches that seq (its event
        there is read too, to see it exists); else its snapshot and the log after it."""
        if known is None or known.task_id != claim.task_id or known.epoch + 1 != claim.epoch:
            return await self.load(claim.task_id, version)
        events = await self.read_log(claim.task_id, after_seq=known.seq - 1)
        if not events or events[0].seq != known.seq:
            return await self.load(claim.task_id, version)
        inbox = await self.read_inbox(claim.task_id)
        return LoadedTask(None, events[1:], inbox, after_seq=known.seq)

    async def _start_job(
        self, claim: Claim, loaded: LoadedTask, starts: JobStarts, version: str
    ) -> LoadedTask | None:
        """The fresh job's first events under its new claim (ADR-0101), and the task as it
        then is; None (the claimer reads it) where that append's outcome is not known."""
        events = start_events(loaded, starts)
        if events is None:
            return loaded
        try:
            await self.append(claim, loaded.events[-1].seq, events)
            return replace(await self.load(claim.task_id, version), started_by_claim=True)
        except StoreError:
            return None

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        migrate: bool = True,
        check_schema: bool = True,
        busy_timeout_seconds: float = 30.0,
    ) -> SqliteStore:
        """Open (creating if need be) the store file; migrate it, or check it is current.

        `check_schema=False` is for `noeta db migrate`, which migrates it next.
        """
        if sqlite3.sqlite_version_info < _MINIMUM_SQLITE:
            raise ConfigError(f"noeta needs sqlite 3.24 or newer, not {sqlite3.sqlite_version}")
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noeta-sqlite")
        try:
            open_file = functools.partial(connect, path, busy_timeout_seconds)
            connection = await asyncio.get_running_loop().run_in_executor(executor, open_file)
        except sqlite3.Error as error:
            executor.shutdown(wait=False)
            raise StoreUnavailable(f"sqlite store {path}: {error}") from error
        store = cls(path, connection, executor)
        try:
            if migrate:
                await store.migrate()
            elif check_schema:
                await store._run(store._check_schema)
        except BaseException:
            await store.close()
            raise
        return store

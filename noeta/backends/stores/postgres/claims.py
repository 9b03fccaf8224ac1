"""Claims and leases on PostgreSQL: claiming (the next due task, or one named task),
renewing a worker's round, releasing, and what is due or owned."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from noeta.backends.stores.job_starts import pin_names, pinned_data
from noeta.backends.stores.postgres.claim_sql import (
    CLAIM_AND_LOAD,
    CLAIM_AND_START_JOBS,
    CLAIM_NAMED_AND_LOAD,
    CLAIM_NAMED_AND_START_JOBS,
    CLAIM_NEXT_TASK,
    CLAIM_THIS_TASK,
    COUNT_CLAIMABLE,
    LEAN_CLAIM_AND_LOAD,
    LEAN_CLAIM_AND_START_JOBS,
    OWNED_BY,
    RELEASE_CLAIM,
    RENEW_CLAIMS,
    SECONDS_UNTIL_DUE,
)
from noeta.backends.stores.postgres.claimed import (
    claim_params,
    claimed_tasks,
    known_params,
    settings_seen,
)
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import Claim, ClaimedTask, JobStarts, check_key, check_lease

# The due-walk claims by (lean, starts jobs): the lean ones while no queue of the
# claimer has settings (ADR-0144), the starting ones where the runner may start jobs.
_DUE_CLAIMS = {
    (False, False): CLAIM_AND_LOAD,
    (False, True): CLAIM_AND_START_JOBS,
    (True, False): LEAN_CLAIM_AND_LOAD,
    (True, True): LEAN_CLAIM_AND_START_JOBS,
}


class PostgresClaims(PostgresConnection):
    """The claim half of the `Store` protocol."""

    # Whether a lean claim saw a queue of its claimer with settings: then every claim of
    # this store sends the full statement (ADR-0144). Never set back: settings are rare,
    # and the full statement is right for every queue.
    queue_settings_seen = False

    async def claim(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        params = claim_params(worker, queues, lease_seconds, 1, offers=offers)
        row = await self._write(CLAIM_NEXT_TASK, params)
        if row is None:
            return None
        return Claim(row[0], worker, row[1], row[2], taken_over=row[3])

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
        hold: bool = False,
        ahead: bool = False,
    ) -> list[ClaimedTask]:
        params = claim_params(worker, queues, lease_seconds, limit, excluding, offers)
        params["version"] = snapshot_version
        # The lean statement until one says a queue of its claimer has settings (ADR-0144);
        # a claim ahead always (ADR-0158): it walks only the queues without settings.
        lean = only is None and (ahead or not self.queue_settings_seen)
        if hold and job_starts is None and only is None and self.holds_claims:
            statement = _DUE_CLAIMS[lean, False]
            claimed = await self._claim_and_hold(statement, params, worker, snapshot_version)
        else:
            claimed = await self._claim_and_load(lean, params, worker, job_starts, only)
        if lean and self.queue_settings_seen and len(claimed) < limit and not ahead:
            # The lean walk skipped the queues with settings: the full statement, at once.
            claimed += await self.claim_and_load(
                worker,
                queues,
                lease_seconds,
                limit=limit - len(claimed),
                snapshot_version=snapshot_version,
                excluding=excluding,
                offers=offers,
                job_starts=job_starts,
                hold=hold and not claimed,
            )
        return claimed

    async def _claim_and_load(
        self,
        lean: bool,
        params: dict[str, Any],
        worker: str,
        job_starts: JobStarts | None,
        only: Collection[str] | None,
    ) -> list[ClaimedTask]:
        version = params["version"]
        statement = _DUE_CLAIMS[lean, job_starts is not None]
        if job_starts is not None:
            params["pinned"] = pinned_data(job_starts)
            params["needs"] = pin_names(job_starts)
        if only is not None:  # a continuation: among the named tasks alone
            params["only"] = list(only)
            params.update(known_params(None))
            named = job_starts is None
            statement = CLAIM_NAMED_AND_LOAD if named else CLAIM_NAMED_AND_START_JOBS
        if only is None and job_starts is not None:
            # The claim loop's claim that starts jobs rides with the finishes in flight
            # (ADR-0116); a plain one goes alone, beside them: riding, it locked an agent
            # drain's runs into groups out of phase, a claim a group (ADR-0140).
            rows = await self._group_commit.claim(
                statement, params, lambda: self._write_generic(statement, params)
            )
        else:
            rows = await self._write_generic(statement, params)
        self.queue_settings_seen = self.queue_settings_seen or settings_seen(rows)
        claimed = claimed_tasks(rows, worker, version)
        self._claimed_again(claimed)
        return claimed

    async def _claim_and_hold(
        self, statement: str, params: dict[str, Any], worker: str, version: str
    ) -> list[ClaimedTask]:
        """The idle claim of one agent task, its transaction left open for the run's first
        write (ADR-0136); any other outcome is committed before it is returned."""
        rows, connection = await self._claim_held(statement, params)
        self.queue_settings_seen = self.queue_settings_seen or settings_seen(rows)
        claimed = claimed_tasks(rows, worker, version)
        self._claimed_again(claimed)
        if len(claimed) != 1:
            await self._commit_held(connection)
            return claimed
        (only,) = claimed
        held = self._hold_claim(connection, only.claim.task_id, only.claim.epoch)
        return [ClaimedTask(only.claim, only.loaded, held.durable)]

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        rows = await self._read(SECONDS_UNTIL_DUE, {"queues": list(queues)})
        return max(0.0, rows[0][0]) if rows and rows[0][0] is not None else None

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        rows = await self._read(COUNT_CLAIMABLE, {"queues": list(queues)})
        return {queue: count for queue, count in rows}

    async def claim_task(
        self,
        worker: str,
        task_id: str,
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        offered = None if offers is None else sorted(set(offers))
        params = {"worker": worker, "id": task_id, "lease": lease_seconds, "offers": offered}
        row = await self._write(CLAIM_THIS_TASK, params)
        if row is None:
            return None
        return Claim(task_id=row[0], worker=worker, epoch=row[1], lease_until=row[2])

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        check_lease(lease_seconds)
        if not claims:
            return {}
        by_id = {claim.task_id: claim for claim in claims}
        params = {
            "lease": lease_seconds,
            "ids": [c.task_id for c in claims],
            "epochs": [c.epoch for c in claims],
        }
        # A worker's renewals have a connection of their own: a round never waits for one
        # behind its runs' statements, and its claims' leases do not lapse meanwhile
        # (issue 26, ADR-0139).
        rows = await self._write_many(RENEW_CLAIMS, params, pool=self._renewal_pool)
        return {
            task_id: Claim(task_id, by_id[task_id].worker, epoch, lease_until)
            for task_id, epoch, lease_until in rows
        }

    async def release(self, claim: Claim) -> bool:
        row = await self._write(RELEASE_CLAIM, {"id": claim.task_id, "epoch": claim.epoch})
        return row is not None

    async def owned_by(self, worker: str) -> list[Claim]:
        rows = await self._read(OWNED_BY, {"worker": worker})
        return [Claim(task_id, worker, epoch, lease_until) for task_id, epoch, lease_until in rows]

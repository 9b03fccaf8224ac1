"""An append and the claim of the task it makes claimable, pipelined in one transaction
(ADR-0121): a canvas member's finish and its canvas's claim, one round trip and one
commit. The claim is `claim_and_load`'s named one, with every rule of it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from noeta.backends.stores.job_starts import pin_names, pinned_data
from noeta.backends.stores.postgres.appends import PostgresAppends, append_statement
from noeta.backends.stores.postgres.claim_sql import (
    CLAIM_NAMED_AND_LOAD,
    CLAIM_NAMED_AND_START_JOBS,
)
from noeta.backends.stores.postgres.claimed import claim_params, claimed_tasks, known_params
from noeta.core.errors import CommitUnknown, Conflict, StoreError, StoreUnavailable, UnknownTask
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    Continue,
    Delivery,
    NewEvent,
    NextState,
    check_append,
)

log = logging.getLogger(__name__)


class PostgresAppendAndClaim(PostgresAppends):
    """`AppendAndClaim` on PostgreSQL: the append's statement, then the named claim."""

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
        check_append(events, ())
        statement, params = append_statement(
            claim, expected_seq, events, (), deliveries, (), next_state
        )
        claiming, claimed_params = named_claim(then)
        try:
            appended, claimed = await self._write_and_claim(
                statement, params, claiming, claimed_params
            )
        except (CommitUnknown, StoreUnavailable, Conflict, UnknownTask):
            raise  # the append's own outcome: as `append` would say it
        except StoreError as error:  # refused whole: nothing landed; the append alone
            log.info("store: the append and claim of %s went apart (%s)", then.task_id, error)
            return await self.append(
                claim, expected_seq, events, deliveries=deliveries, next_state=next_state
            ), None
        last_seq: int = appended[0][0]
        found = claimed_tasks(claimed, then.worker, then.snapshot_version, then.known)
        return last_seq, found[0] if found else None


def named_claim(then: ClaimAfter) -> tuple[str, dict[str, Any]]:
    """`claim_and_load(only=(then.task_id,))`'s statement and parameters, told the log
    the worker holds of it (`then.known`, ADR-0122)."""
    params = claim_params(
        then.worker, then.queues, then.lease_seconds, 1, then.excluding, then.offers
    )
    params["version"] = then.snapshot_version
    params["only"] = [then.task_id]
    params.update(known_params(then.known))
    if then.job_starts is None:
        return CLAIM_NAMED_AND_LOAD, params
    params["pinned"] = pinned_data(then.job_starts)
    params["needs"] = pin_names(then.job_starts)
    return CLAIM_NAMED_AND_START_JOBS, params

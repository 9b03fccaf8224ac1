"""What a PostgreSQL claim statement takes and returns: its checked parameters, and the
claimed tasks read back from CLAIM_AND_LOAD's rows (claims, snapshots, events, inbox)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from noeta.backends.stores.postgres.inbox import inbox_entry
from noeta.core.ports import payload
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    InboxEntry,
    KnownLog,
    LoadedTask,
    Snapshot,
    StoredEvent,
    check_claim_limit,
    check_key,
    check_lease,
)


def claim_params(
    worker: str,
    queues: Sequence[str],
    lease_seconds: float,
    limit: int,
    excluding: Collection[str] = (),
    offers: Collection[str] | None = None,
) -> dict[str, Any]:
    check_lease(lease_seconds)
    check_key("worker name", worker)
    check_claim_limit(limit)
    # A queue named twice would be walked twice, its rows counted twice against the limit.
    distinct = list(dict.fromkeys(queues))
    return {
        "worker": worker,
        "queues": distinct,
        "lease": lease_seconds,
        "limit": limit,
        "offers": None if offers is None else sorted(set(offers)),
        "excluding": list(excluding),
    }


def known_params(known: KnownLog | None) -> dict[str, Any]:
    """A named claim's `known` parameters (CLAIM_NAMED_AND_LOAD): NULLs where none."""
    if known is None:
        return {"known_id": None, "known_epoch": None, "known_seq": None}
    return {"known_id": known.task_id, "known_epoch": known.epoch, "known_seq": known.seq}


def settings_seen(rows: Sequence[tuple[Any, ...]]) -> bool:
    """Whether a lean claim's rows say one of its queues has settings (part 4, ADR-0144)."""
    return any(row[0] == 4 for row in rows)


def claimed_tasks(
    rows: Sequence[tuple[Any, ...]], worker: str, version: str, known: KnownLog | None = None
) -> list[ClaimedTask]:
    """The claims in CLAIM_AND_LOAD's rows, each with its task as the statement read it;
    `loaded` None where that read missed the log's end (see CLAIM_AND_LOAD). `known`: the
    log the claim was told its claimer holds; a claim marked so read after its seq."""
    known_seq = known.seq if known is not None else None
    claims: dict[str, tuple[Claim, int, bool, bool]] = {}
    snapshots: dict[str, Snapshot] = {}
    events: dict[str, list[StoredEvent]] = {}
    inbox: dict[str, list[InboxEntry]] = {}
    for row in rows:
        part, task_id = row[0], row[1]
        if part == 0:
            claim = Claim(task_id, worker, row[3], row[6], taken_over=row[8])
            # Whether the claim wrote events, and whether it read only after a KnownLog.
            claims[task_id] = (claim, row[2], row[4] is not None, row[7] is not None)
        elif part == 1:
            snapshots[task_id] = Snapshot(task_id, version, row[2], bytes(row[9]))
        elif part == 2:
            stored = StoredEvent(
                task_id, row[2], row[4], payload.decode(row[5]), row[6], row[3], row[7]
            )
            events.setdefault(task_id, []).append(stored)
        elif part == 3:
            entry = inbox_entry((row[2], task_id, row[5], row[4], row[3], row[6]))
            inbox.setdefault(task_id, []).append(entry)
    claimed = []
    for task_id, (claim, last_seq, started, after_known) in claims.items():
        snapshot, log = snapshots.get(task_id), events.get(task_id, [])
        after = known_seq if after_known else None
        start = after if after is not None else (snapshot.seq if snapshot else 0)
        end = log[-1].seq if log else start
        loaded = None
        if end == last_seq:
            loaded = LoadedTask(
                snapshot, log, inbox.get(task_id, []), started_by_claim=started, after_seq=after
            )
        claimed.append(ClaimedTask(claim, loaded))
    return claimed

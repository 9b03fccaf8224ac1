"""Store values as the sqlite schema holds them: times as integer microseconds, payloads
encoded, keys checked, all before any write."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from noeta.core.ports.payload import encode
from noeta.core.ports.store import (
    Continue,
    Delivery,
    Finish,
    NewEvent,
    NewTask,
    NextState,
    TaskRecord,
    TaskStatus,
    Wait,
    WaitHolding,
    check_key,
    check_lease,
    check_moment,
)

# Times are INTEGER microseconds since the Unix epoch (see queue/sqlite/0001): exact for
# every datetime, and they sort as the times do.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class EncodedTask:
    """A `NewTask` with its payloads encoded and its time converted, ready to insert."""

    id: str
    queue: str
    ready_at: int | None
    events: list[tuple[str, str]]
    concurrency_key: str | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True)
class EncodedDelivery:
    """A `Delivery` with its key checked and its payload encoded, ready to insert."""

    task_id: str
    dedupe_key: str | None
    payload: str


def encode_events(events: Sequence[NewEvent]) -> list[tuple[str, str]]:
    return [(check_key("event type", event.type), encode(event.data)) for event in events]


def encode_task(task: NewTask) -> EncodedTask:
    ready_at = None if task.ready_at is None else to_micros(task.ready_at)
    return EncodedTask(
        check_key("task id", task.id),
        check_key("queue name", task.queue),
        ready_at,
        encode_events(task.events),
        task.concurrency_key,
        task.priority,
    )


def encode_delivery(delivery: Delivery) -> EncodedDelivery:
    key = delivery.dedupe_key
    return EncodedDelivery(
        check_key("task id", delivery.task_id),
        None if key is None else check_key("dedupe key", key),
        encode(delivery.payload),
    )


def next_state_values(next_state: NextState) -> tuple[str, int | None]:
    """The state as the PostgreSQL function takes it: (p_next, p_until)."""
    match next_state:
        case Continue():
            return "continue", None
        case WaitHolding():
            return "wait_holding", None
        case Wait(until=until):
            return "wait", None if until is None else to_micros(until)
        case Finish(status=status):
            return status.value, None
    raise TypeError(f"not a next state: {next_state!r}")


def task_record(row: Any) -> TaskRecord:
    task_id, queue, status, owner, epoch, lease_until, ready_at, last_seq, created, updated = row[
        :10
    ]
    return TaskRecord(
        id=task_id,
        queue=queue,
        status=TaskStatus(status),
        owner=owner,
        owner_epoch=epoch,
        lease_until=None if lease_until is None else from_micros(lease_until),
        ready_at=None if ready_at is None else from_micros(ready_at),
        last_seq=last_seq,
        created_at=from_micros(created),
        updated_at=from_micros(updated),
        concurrency_key=row[10],
        priority=row[11],
    )


def lease_micros(lease_seconds: float) -> int:
    return max(1, round(check_lease(lease_seconds) * 1_000_000))


def now_micros() -> int:
    return time.time_ns() // 1000


def to_micros(moment: datetime) -> int:
    check_moment(moment)
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)

"""Unique and debounced jobs from the client (ADR-0093): `unique_key`, `unique_for` and
`debounce` checked before anything is written, and the create that answers with the job
holding the key, sent again after a lost reply as `create_once` sends a plain job."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from noeta.client.creating import RESENDS, TaskExists, before_resend, create_batch, create_once
from noeta.core.errors import CommitUnknown, ConfigError, Conflict, PayloadError, StoreUnavailable
from noeta.core.ports.store import NewTask, Store, check_key
from noeta.core.ports.unique_jobs import KeyRule, UniqueJobs

MAX_SECONDS = 100 * 366 * 24 * 3600  # a window or a debounce: a century is plenty


def key_rule(
    job: str,
    key: str | None,
    unique_for: float | None,
    debounce: float | None,
    *,
    start: tuple[datetime | None, float | None] = (None, None),
    id: str | None = None,
    keys_name: str = "unique_key",
) -> KeyRule | None:
    """The rule `enqueue` was given (None: a plain job), or ConfigError. `key` is the
    unique key (for a batch, named `keys_name` "unique_keys": each of them); `start` the
    run_at and delay given."""
    needs = "a unique_key" if keys_name == "unique_key" else keys_name
    if unique_for is not None and not (_seconds(unique_for) and 0 < unique_for <= MAX_SECONDS):
        raise ConfigError(
            f"unique_for must be more than 0 seconds (at most {MAX_SECONDS:,}), not {unique_for!r}"
        )
    if debounce is not None and not (_seconds(debounce) and 0 <= debounce <= MAX_SECONDS):
        raise ConfigError(
            f"debounce must be zero or more seconds (at most {MAX_SECONDS:,}), not {debounce!r}"
        )
    if unique_for is not None and debounce is not None:
        raise ConfigError("give unique_for or debounce, not both")
    if key is None:
        for name, value in (("unique_for", unique_for), ("debounce", debounce)):
            if value is not None:
                raise ConfigError(f"{name} needs {needs}: the key that names the job")
        return None
    if unique_for is None and debounce is None:
        raise ConfigError(f"{keys_name} needs unique_for=SECONDS or debounce=SECONDS")
    if id is not None:
        raise ConfigError("give id or unique_key, not both: the key names the job")
    if debounce is not None and start != (None, None):
        raise ConfigError(
            "debounce sets when the job starts (that long after the last enqueue of its "
            "key): give no delay or run_at with it"
        )
    try:
        check_key("unique key", key)
    except PayloadError as error:
        raise ConfigError(str(error)) from None
    return KeyRule(job, unique_for, debounce)


def batch_keys(
    job: str,
    keys: Sequence[str] | None,
    count: int,
    unique_for: float | None,
    debounce: float | None,
    *,
    start: tuple[datetime | None, float | None],
) -> tuple[list[str] | None, KeyRule | None]:
    """`enqueue_many`'s unique_keys, one per job, and their rule, checked as `key_rule`
    checks one (None, None: a plain batch)."""
    if isinstance(keys, str):
        raise ConfigError("unique_keys is a list of keys, one per job, not one string")
    listed = None if keys is None else list(keys)
    if listed is not None and len(listed) != count:
        raise ConfigError(f"unique_keys has {len(listed)} keys for {count} jobs: give one each")
    keys_to_check: list[str | None] = [None] if not listed else list(listed)
    rule = None
    for key in keys_to_check:
        rule = key_rule(job, key, unique_for, debounce, start=start, keys_name="unique_keys")
    return listed, rule


async def create_job(store: Store, task: NewTask, key: str | None, rule: KeyRule | None) -> str:
    """Create `task`, or with a key and rule, the job holding the key: its id."""
    if key is None or rule is None:
        await create_once(store, task)
        return task.id
    unique = _unique_jobs(store)
    for resend in range(RESENDS + 1):
        try:
            return await unique.create_unique_task(task, key, rule)
        except (CommitUnknown, StoreUnavailable) as error:
            await before_resend(error, resend, [task.id])
        except Conflict:
            raise TaskExists(f"a task with id {task.id!r} exists already", task.id) from None
    raise AssertionError("unreachable")


async def create_jobs(
    store: Store, tasks: list[NewTask], keys: list[str] | None, rule: KeyRule | None
) -> list[str]:
    """Create the batch, or with keys, each job unless another holds its key (in order,
    in one transaction): the id of each job's holder."""
    if keys is None or rule is None:
        await create_batch(store, tasks, "job")
        return [task.id for task in tasks]
    unique = _unique_jobs(store)
    for resend in range(RESENDS + 1):
        try:
            return await unique.create_unique_tasks(tasks, keys, rule)
        except (CommitUnknown, StoreUnavailable) as error:
            await before_resend(error, resend, [task.id for task in tasks])
        except Conflict as error:
            raise TaskExists(
                f"a task with id {error.task_id!r} exists already; nothing of the batch "
                "was written",
                error.task_id,
            ) from None
    raise AssertionError("unreachable")


def _unique_jobs(store: Store) -> UniqueJobs:
    unique = store.capabilities.unique_jobs
    if unique is None:
        raise ConfigError(
            f"this store ({type(store).__name__}) cannot keep a unique key; nothing was written"
        )
    return unique


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

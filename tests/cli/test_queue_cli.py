# ruff: noqa: E501  (the table of bad inputs reads best one input a line)
"""`noeta queue set/list` and `noeta submit --key/--priority` through the real executable:
each bad input of issue 20 is one line, a non-zero exit, and changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask
from noeta.testing.command_line import run_in_process


def noeta(url: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "OTEL_"))}
    environment["NOETA_STORE"] = url
    return run_in_process(arguments, environment)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    assert noeta(url, "db", "migrate").returncode == 0
    assert noeta(url, "queue", "set", "mail", "--concurrency", "2").returncode == 0
    return url


def state(url: str) -> tuple[str, str]:
    queues = noeta(url, "queue", "list", "--json")
    tasks = noeta(url, "tasks", "--json")
    assert queues.returncode == 0 and tasks.returncode == 0, queues.stderr + tasks.stderr
    return queues.stdout, tasks.stdout


BAD_INPUTS: list[tuple[str, list[str], str]] = [
    ("a concurrency of zero", ["queue", "set", "mail", "--concurrency", "0"], "from 1 to 1,000,000, not 0"),
    ("a negative concurrency", ["queue", "set", "mail", "--concurrency", "-3"], "not -3"),
    ("a concurrency that is not a number", ["queue", "set", "mail", "--concurrency", "many"], "'many' is not a valid integer"),
    ("a per-key limit of zero", ["queue", "set", "mail", "--per-key", "0"], "per-key concurrency"),
    ("a rate of zero", ["queue", "set", "mail", "--rate", "0/m"], "a rate's count"),
    ("an unparseable period", ["queue", "set", "mail", "--rate", "10/fortnight"], "'fortnight' is not a period"),
    ("a rate without a period", ["queue", "set", "mail", "--rate", "10"], "a rate is N/PERIOD"),
    ("a period of zero", ["queue", "set", "mail", "--rate", "5/0s"], "period must be above 0"),
    ("an empty queue name", ["queue", "set", "", "--concurrency", "1"], "a queue name must not be empty"),
    ("a queue name too long", ["queue", "set", "q" * 600, "--concurrency", "1"], "the limit is 512"),
    ("nothing to set", ["queue", "set", "mail"], "nothing to set"),
    ("--clear with a limit", ["queue", "set", "mail", "--clear", "--concurrency", "1"], "give it alone"),
    ("a key longer than the id rule", ["submit", "hi", "--queue", "mail", "--key", "k" * 129], "(129 characters) is not allowed"),
    ("a key with a slash", ["submit", "hi", "--queue", "mail", "--key", "a/b"], "a concurrency key is"),
    ("a priority above the range", ["submit", "hi", "--queue", "mail", "--priority", "10"], "0<=x<=9"),
    ("a priority below the range", ["submit", "hi", "--queue", "mail", "--priority", "-1"], "0<=x<=9"),
    ("a job with a bad key", ["submit", "--job", "x", "--key", ".hidden"], "a concurrency key is"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "arguments", "says"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_a_bad_queue_input_is_one_line_and_changes_nothing(
    url: str, name: str, arguments: list[str], says: str
) -> None:
    before = state(url)
    result = noeta(url, *arguments)
    lines = result.stderr.strip().splitlines()
    assert result.returncode not in (0, None), (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
    assert says in lines[0], lines[0]
    assert state(url) == before


async def claim_three(url: str) -> None:
    store = await open_store(url)
    try:
        for n in range(3):
            await store.create_task(NewTask(f"t{n}", [NewEvent("x", {})], queue="wide"))
        batch = await store.claim_and_load("w", ["wide"], 30.0, limit=3, snapshot_version="v")
        assert len(batch) == 3
    finally:
        await store.close()


def test_a_limit_lowered_below_running_says_so_and_takes_effect(url: str) -> None:
    asyncio.run(claim_three(url))
    result = noeta(url, "queue", "set", "wide", "--concurrency", "1")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        "noeta: queue wide: 3 running, above the limit of 1: they finish; "
        "no new claims until fewer than 1 run"
    ]
    [wide] = [q for q in json.loads(state(url)[0]) if q["queue"] == "wide"]
    assert wide["running"] == 3 and wide["settings"]["concurrency"] == 1


def test_set_list_and_clear(url: str) -> None:
    result = noeta(url, "queue", "set", "mail", "--per-key", "1", "--rate", "600/m", "--paused")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.strip() == (
        "mail: 0 claimable, 0 running, 0 waiting for a slot; "
        "concurrency 2, per key 1, rate 600/m, PAUSED"
    )
    submitted = noeta(
        url, "submit", "hi", "--queue", "mail", "--key", "tenant-a", "--priority", "7"
    )
    assert submitted.returncode == 0, submitted.stderr
    listed = noeta(url, "queue", "list", "mail")
    assert listed.stdout.startswith("mail: 1 claimable, 0 running, 1 waiting for a slot")
    assert noeta(url, "queue", "set", "mail", "--clear").stdout.strip() == "mail: settings cleared"
    [mail] = json.loads(state(url)[0])
    assert mail["settings"] is None and mail["waiting_for_slot"] == 0


def test_the_list_counts_tasks_scheduled_later(url: str) -> None:
    async def scheduled() -> None:
        store = await open_store(url)
        try:
            later = (await store.clock()) + timedelta(hours=1)
            first = [NewEvent("created", {"id": "later"})]
            assert await store.create_task(NewTask("later", first, queue="mail", ready_at=later))
        finally:
            await store.close()

    asyncio.run(scheduled())
    listed = noeta(url, "queue", "list", "mail")
    assert listed.stdout.startswith(
        "mail: 0 claimable, 0 running, 0 waiting for a slot, 1 scheduled later; concurrency 2"
    ), listed.stdout + listed.stderr
    [mail] = json.loads(state(url)[0])
    assert mail["scheduled"] == 1 and mail["claimable"] == 0

"""`noeta db prune` through the real executable: what it prunes and says, and its bad
inputs (issue 18): a negative or unreadable duration, a store not migrated, a second
prune while one runs. Each is one line on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres.retention import RELEASE_PRUNE_LOCK, TRY_PRUNE_LOCK
from noeta.testing.command_line import run_in_process
from noeta.testing.store_contract.fixtures import created
from noeta.testing.store_contract.retention import finish


def noeta(*arguments: str, store: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "OTEL_"))}
    return run_in_process(arguments, {**environment, "NOETA_STORE": store})  # not --store


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
    return lines[0]


async def finished_tasks(url: str, *ids: str) -> None:
    store = await open_store(url, migrate=True)
    try:
        for task_id in ids:
            await store.create_task(created(task_id))
            await finish(store, task_id)
    finally:
        await store.close()


async def test_prune_says_what_it_pruned_and_the_ids_stay_taken(store_url: str) -> None:
    await finished_tasks(store_url, "a", "b")
    dry = noeta("db", "prune", "--finished-before", "0s", "--dry-run", store=store_url)
    assert dry.stdout == "would prune 2 finished tasks (4 events)\n", dry.stderr
    assert noeta("db", "prune", "--finished-before", "7d", store=store_url).stdout == (
        "pruned 0 finished tasks (0 events)\n"
    )
    done = noeta("db", "prune", "--finished-before", "0s", store=store_url)
    assert done.stdout == "pruned 2 finished tasks (4 events)\n", done.stderr
    again = noeta("submit", "hi", "--id", "a", "--model", "openai:m", store=store_url)
    assert "exists already (or existed and was pruned)" in one_line_error(again)


@pytest.mark.parametrize(
    ("duration", "says"),
    [
        ("-7d", "'-7d' is a negative duration"),
        ("-1s", "'-1s' is a negative duration"),
        ("7x", "'7x' is an unreadable duration"),
        ("7", "'7' is an unreadable duration"),
        ("a week", "'a week' is an unreadable duration"),
        ("", "'' is an unreadable duration"),
        ("9" * 30 + "d", "too long a duration"),
    ],
)
def test_a_bad_duration_is_one_line(tmp_path: Path, duration: str, says: str) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    result = noeta("db", "prune", "--finished-before", duration, store=store)
    assert says in one_line_error(result)
    assert result.stdout == ""


def test_a_store_not_migrated_is_one_line(empty_postgres_url: str) -> None:
    result = noeta("db", "prune", "--finished-before", "7d", store=empty_postgres_url)
    assert "run `noeta db migrate`" in one_line_error(result)


async def test_a_second_prune_on_postgres_is_refused_while_one_runs(postgres_url: str) -> None:
    await finished_tasks(postgres_url, "a")
    # The session lock a running prune holds, taken here as that prune would take it.
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as running:
        assert (await (await running.execute(TRY_PRUNE_LOCK)).fetchone()) == (True,)
        result = await asyncio.to_thread(
            noeta, "db", "prune", "--finished-before", "0s", store=postgres_url
        )
        assert "another prune is running" in one_line_error(result)
        await running.execute(RELEASE_PRUNE_LOCK)
    result = noeta("db", "prune", "--finished-before", "0s", store=postgres_url)
    assert result.stdout == "pruned 1 finished tasks (2 events)\n", result.stderr


def test_a_second_prune_on_sqlite_is_refused_while_one_runs(tmp_path: Path) -> None:
    path = tmp_path / "noeta.db"
    asyncio.run(finished_tasks(f"sqlite:///{path}", "a"))
    with open(f"{path}.prune-lock", "w") as running:
        fcntl.flock(running, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = noeta("db", "prune", "--finished-before", "0s", store=f"sqlite:///{path}")
        assert "another prune is running" in one_line_error(result)
    result = noeta("db", "prune", "--finished-before", "0s", store=f"sqlite:///{path}")
    assert result.stdout == "pruned 1 finished tasks (2 events)\n", result.stderr

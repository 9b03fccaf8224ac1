"""Plugin hooks with the example plugin of docs/plugins.md (examples/notify_plugin.py):
a notification rides with the finish, on_event is at least once across a real SIGKILL,
and a hook that raises or returns an impossible mark is a clear failure reason."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.hooks import TaskView
from noeta.core.ports.store import Delivery, NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent
from noeta.core.runner.task import TaskRunner
from noeta.plugins.loading import PluginSpec, load

REPOSITORY = Path(__file__).parents[2]
EXAMPLES = REPOSITORY / "examples"
# One refused tool call, then an answer: four appends, each with events for on_event.
REPLIES = [{"tool_calls": [{"id": "c1", "name": "Nothing", "input": {}}]}, {"text": "hi"}]


@pytest.fixture(autouse=True)
def examples_importable() -> Iterator[None]:
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))
    sys.modules.pop("notify_plugin", None)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


async def create(store: Store, tmp_path: Path, task_id: str, **config: Any) -> None:
    script = tmp_path / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": config.pop("replies", REPLIES)}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", **config)
    assert await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def run(store: Store, runner: TaskRunner, task_id: str) -> None:
    claim = await store.claim_task("w", task_id, 60)
    assert claim is not None
    await runner.run(claim)


def ledger_seqs(ledger: Path, task_id: str) -> list[int]:
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return [int(line.split()[1]) for line in lines if line.split()[0] == task_id]


async def event_seqs(store: Store, task_id: str) -> list[int]:
    return [e.seq for e in await store.read_log(task_id) if e.type != "PluginRecord"]


async def test_the_example_notifies_once_with_the_finish_and_ledgers_every_event(
    store: Store, tmp_path: Path
) -> None:
    ledger = tmp_path / "events.log"
    notify = load(PluginSpec("module", "notify_plugin", {"outbox": "inbox", "ledger": str(ledger)}))
    await create(store, tmp_path, "inbox", interactive=True, replies=[])
    await create(store, tmp_path, "t")
    await run(store, TaskRunner(store, ProviderRegistry(), plugins=[notify.plugin]), "t")

    log = await store.read_log("t")
    assert log[-1].type == "TaskFinished"
    (note,) = await store.read_inbox("inbox")
    assert note.payload == {"text": "task t done"}
    assert note.dedupe_key == f"notify:t:{log[-1].seq}"  # keyed by the finishing event's seq
    assert ledger_seqs(ledger, "t") == await event_seqs(store, "t")
    assert any(e.type == "PluginRecord" for e in log)  # its progress mark, in the log


def hooked_worker(
    url: str, ledger: Path, failpoints: str = "", until: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETA_FAILPOINTS": failpoints, "PYTHONPATH": str(EXAMPLES)}
    command = ["tests.plugins.hooked_worker", url, "t", "inbox", str(ledger), until]
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("append", [2, 4])  # hits 1 and 3 append its own records
async def test_killed_between_an_event_and_its_on_event_it_is_delivered_again_without_a_gap(
    postgres_url: str, tmp_path: Path, append: int
) -> None:
    ledger = tmp_path / "events.log"
    store = await open_store(postgres_url, migrate=True)
    try:
        await create(store, tmp_path, "inbox", interactive=True, replies=[])
        await create(store, tmp_path, "t")
        died = hooked_worker(postgres_url, ledger, f"hooks.before_on_event=kill@{append}")
        assert died.returncode == -signal.SIGKILL, died.stderr
        missed = len(await event_seqs(store, "t")) - len(ledger_seqs(ledger, "t"))
        assert missed > 0  # the kill really skipped on_event calls
        done = hooked_worker(postgres_url, ledger)
        assert done.stdout.split() == ["finished", "done"], done.stderr
        # At least once, and keyed by seq: every event once, in order, no gap.
        assert ledger_seqs(ledger, "t") == await event_seqs(store, "t")
        assert len(await store.read_inbox("inbox")) == 1
    finally:
        await store.close()


async def test_killed_between_on_event_and_the_wait_nothing_is_delivered_twice_or_missed(
    postgres_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "events.log"
    store = await open_store(postgres_url, migrate=True)
    try:
        await create(store, tmp_path, "inbox", interactive=True, replies=[])
        await create(store, tmp_path, "t", interactive=True)
        died = hooked_worker(postgres_url, ledger, "hooks.before_wait=kill@1")
        assert died.returncode == -signal.SIGKILL, died.stderr
        # Killed before its wait: not handed back, yet every on_event ran and its records
        # (the plugin's mark) landed.
        assert (await store.get_task("t")).status == "running"  # type: ignore[union-attr]
        assert ledger_seqs(ledger, "t") == await event_seqs(store, "t")
        at_the_kill = [(e.seq, e.type) for e in await store.read_log("t")]
        assert at_the_kill[-1][1] == "PluginRecord"
        waits = hooked_worker(postgres_url, ledger, until="waiting")
        assert waits.stdout.split() == ["waiting"], waits.stderr
        # The next claim found the mark at the log's end: nothing delivered again.
        assert [(e.seq, e.type) for e in await store.read_log("t")] == at_the_kill
        assert ledger_seqs(ledger, "t") == await event_seqs(store, "t")
    finally:
        await store.close()


class Raising:
    name = "boom"

    def tools(self) -> Sequence[object]:
        return ()

    async def on_event(self, view: TaskView, event: LoggedEvent) -> None:
        raise RuntimeError("the webhook is down")


class FarMark(Raising):
    name = "far"

    async def on_event(self, view: TaskView, event: LoggedEvent) -> None:
        return None

    def delivered_through(self, view: TaskView) -> int:
        return 10_000


async def test_a_hook_that_raises_fails_the_turn_with_an_internal_error_and_counts(
    store: Store, tmp_path: Path
) -> None:
    await create(store, tmp_path, "t", interactive=True, replies=[{"text": "a"}, {"text": "b"}])
    runner = TaskRunner(store, ProviderRegistry(), plugins=[Raising()])
    reason = "internal_error: HookFailed: plugin boom: RuntimeError: the webhook is down"
    await run(store, runner, "t")
    ended = [e.data for e in await store.read_log("t") if e.type == "TurnEnded"]
    assert ended == [{"v": 1, "outcome": "failed", "answer": "", "error": reason}]
    assert (await store.get_task("t")).status == "waiting"  # type: ignore[union-attr]
    # The second bug in a row ends the task (SPEC §6).
    await store.deliver(Delivery("t", {"text": "again"}, "message:1"))
    await run(store, runner, "t")
    finished = (await store.read_log("t"))[-1]
    assert finished.type == "TaskFinished"
    assert finished.data == {"v": 1, "status": "failed", "answer": "", "error": reason}


async def test_a_mark_beyond_the_logs_end_is_a_clear_failure_reason(
    store: Store, tmp_path: Path
) -> None:
    await create(store, tmp_path, "t")
    await run(store, TaskRunner(store, ProviderRegistry(), plugins=[FarMark()]), "t")
    finished = (await store.read_log("t"))[-1]
    assert finished.data["status"] == "failed"  # type: ignore[index]
    assert finished.data["error"] == (  # type: ignore[index]
        "internal_error: HookFailed: plugin far: delivered_through returned 10000, "
        "but the log runs from 0 to 1"
    )


@pytest.mark.parametrize("newer", ["TaskCreated", "AttemptFailed"])
async def test_a_log_from_a_newer_noeta_is_left_before_any_hook_or_pin_writes_to_it(
    store: Store, tmp_path: Path, newer: str
) -> None:
    # A worker handed every event of a log it cannot read by on_event (the hook's record
    # appended to it, a notification sent about an UnknownEvent) and pinning its plugins
    # wrote to a task it was leaving: 06737cf did, in `make cluster-upgrade` (ADR-0097).
    ledger = tmp_path / "events.log"
    notify = load(PluginSpec("module", "notify_plugin", {"outbox": "inbox", "ledger": str(ledger)}))
    await create(store, tmp_path, "inbox", interactive=True, replies=[])
    if newer == "TaskCreated":  # a version of a known type this code does not know
        created = [NewEvent("TaskCreated", {"v": 99, "model": "scripted:none", "prompt": "go"})]
    else:  # a type this code does not know, after events it does
        config = events.TaskCreated(model="scripted:none", prompt="go")
        created = [NewEvent(*events.encode(config)), NewEvent("FromTheFuture", {"v": 1})]
    assert await store.create_task(NewTask("t", created))
    claim = await store.claim_task("w", "t", 60)
    assert claim is not None
    runner = TaskRunner(store, ProviderRegistry(), plugins=[notify.plugin])
    result = await runner.run(claim)
    assert result.outcome == "left_for_newer"
    assert [e.type for e in await store.read_log("t")] == [e.type for e in created]
    assert not ledger.exists() and await store.read_inbox("inbox") == []


class WaitsOnAnotherRun(Raising):
    """An on_event hook that awaits something else the process does with the store: a
    read by another asyncio task (another run's, a webhook's client standing in)."""

    name = "elsewhere"

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads = 0

    async def on_event(self, view: TaskView, event: LoggedEvent) -> None:
        await asyncio.create_task(self.store.get_task(view.task_id))
        self.reads += 1


async def test_a_hook_holds_no_store_connection_while_it_awaits(
    postgres_url: str, tmp_path: Path
) -> None:
    # A worker's store with one connection beside its rounds (ADR-0139): a hook run while
    # its step held that connection would wait for it (the store's deadline) and fail.
    store = await PostgresStore.open(
        postgres_url, max_connections=3, min_connections=3, for_worker=True
    )
    try:
        hook = WaitsOnAnotherRun(store)
        runner = TaskRunner(store, ProviderRegistry(), plugins=[hook])
        await create(store, tmp_path, "t", interactive=True, replies=[{"text": "a"}, {"text": "b"}])
        await run(store, runner, "t")
        # The message is taken in a step that only reads and writes the store, which held
        # one connection for all its statements, hooks included, before ADR-0139.
        await store.deliver(Delivery("t", {"text": "again"}, "message:1"))
        await run(store, runner, "t")
        log = await store.read_log("t")
        ended = [e.data["outcome"] for e in log if e.type == "TurnEnded"]  # type: ignore[index]
        assert ended == ["answered", "answered"] and hook.reads >= 6
    finally:
        await store.close()

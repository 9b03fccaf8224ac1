"""Forking a task (issue 30 item 1, ADR-0091), on sqlite and PostgreSQL: the fork's log is
the source's through a step plus one change, and nothing before the step runs again: the
tool's side-effect ledger and the scripted model's requests show it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.models.scripted import ScriptedProvider
from noeta.backends.stores import open_store
from noeta.client import AsyncClient, ForkRefused
from noeta.client.creating import TaskExists
from noeta.client.forking import ForkChange, fork_points, forked_events
from noeta.core.errors import NoetaError, UnknownTask
from noeta.core.ports.store import NewEvent, NewTask, StoredEvent
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import next_action
from noeta.core.runner.task import TaskRunner
from noeta.testing.command_line import run_in_process
from tests.core.runner.test_runner import Echo, create, run_once, script
from tests.core.test_golden_logs import NAMES, plain, read_log

GOLDEN = "tool_results_back_to_the_model"  # a golden log with several fork points
CALL = {"tool_calls": [{"id": "c1", "name": "Echo", "input": {"text": "a"}}]}


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[AsyncClient]:
    await (await open_store(store_url, migrate=True)).close()
    async with AsyncClient(store_url, start_embedded=False) as client:
        yield client


async def ran(client: AsyncClient, tmp_path: Path, *replies: dict[str, object]) -> Echo:
    """Task "t": a tool call, then the replies after it, run to its end."""
    store = await client.store()
    await create(store, "t", script(tmp_path, CALL, *replies), prompt="go", tools=("Echo",))
    echo = Echo()
    result = await run_once(TaskRunner(store, ProviderRegistry(), {"Echo": echo}), store, "t")
    assert result.state.finished == "done" and echo.runs == ["t:c1"]
    return echo


async def seq_of(client: AsyncClient, task_id: str, event_type: str) -> int:
    log = await (await client.store()).read_log(task_id)
    return next(e.seq for e in log if e.type == event_type)


async def test_a_fork_after_a_tool_call_sends_the_same_request_and_runs_no_tool_again(
    client: AsyncClient, tmp_path: Path
) -> None:
    store = await client.store()
    await create(store, "t", script(tmp_path, CALL, {"text": "done"}), prompt="go", tools=("Echo",))
    echo, registry = Echo(), ProviderRegistry()
    runner = TaskRunner(store, registry, {"Echo": echo})
    await run_once(runner, store, "t")
    at = await seq_of(client, "t", "ToolFinished")
    handle = await client.fork("t", at, id="f")
    result = await run_once(runner, store, handle.id)
    assert (result.state.finished, result.state.last_answer) == ("done", "done")
    assert echo.runs == ["t:c1"]  # the fork's worker did not run the tool again
    created = (await store.read_log("f"))[0]
    assert (created.data["forked_from"], created.data["forked_at"]) == ("t", at)  # type: ignore[index]
    provider, _ = await registry.provider_for(created.data["model"])  # type: ignore[index]
    assert isinstance(provider, ScriptedProvider)
    # The source sent two requests, the fork one: byte for byte the source's second.
    assert len(provider.requests) == 3 and provider.requests[2] == provider.requests[1]


async def test_a_fork_replacing_a_reply_runs_from_the_new_reply(
    client: AsyncClient, tmp_path: Path
) -> None:
    echo = await ran(client, tmp_path, {"text": "done"})
    at = await seq_of(client, "t", "ModelReplied")
    reply = {"content": [{"type": "text", "text": "no tool after all"}]}
    handle = await client.fork("t", at, id="f", reply=reply)
    store = await client.store()
    result = await run_once(TaskRunner(store, ProviderRegistry(), {"Echo": echo}), store, "f")
    assert (result.state.finished, result.state.last_answer) == ("done", "no tool after all")
    assert echo.runs == ["t:c1"]
    assert "ModelCalled" not in [e.type for e in (await store.read_log(handle.id))[at:]]


async def test_a_fork_with_a_message_opens_a_turn_where_one_ended(
    client: AsyncClient, tmp_path: Path
) -> None:
    echo = await ran(client, tmp_path, {"text": "done"}, {"text": "and more"})
    at = await seq_of(client, "t", "TurnEnded")
    await client.fork("t", at, id="f", message="once more?")
    store = await client.store()
    result = await run_once(TaskRunner(store, ProviderRegistry(), {"Echo": echo}), store, "f")
    assert (result.state.finished, result.state.last_answer) == ("done", "and more")
    assert echo.runs == ["t:c1"]


async def test_a_fork_with_another_model_calls_that_model(
    client: AsyncClient, tmp_path: Path
) -> None:
    echo = await ran(client, tmp_path, {"text": "done"})
    # A script answers the task's N-th call with its N-th reply: the fork's is the second.
    other = script(tmp_path, {"text": "never sent"}, {"text": "from the other model"})
    await client.fork("t", await seq_of(client, "t", "ToolFinished"), id="f", model=other)
    store = await client.store()
    result = await run_once(TaskRunner(store, ProviderRegistry(), {"Echo": echo}), store, "f")
    assert result.state.last_answer == "from the other model"


async def test_a_fork_point_must_be_a_step_boundary(client: AsyncClient, tmp_path: Path) -> None:
    await ran(client, tmp_path, {"text": "done"})
    started = await seq_of(client, "t", "ToolStarted")
    with pytest.raises(ForkRefused) as refused:
        await client.fork("t", started)
    assert "cut tool call c1 (Echo) in half" in str(refused.value)
    assert "fork points near it: 1, 3, 5, 7, 8" in str(refused.value)
    reasons = {
        await seq_of(client, "t", "ModelCalled"): "a model call is awaiting its reply",
        await seq_of(client, "t", "TaskFinished"): "it is the task's finish",
        0: "seq 0 is not in task t's log (seqs 1 to 9)",
        99: "seq 99 is not in task t's log",
    }
    for at, reason in reasons.items():
        with pytest.raises(ForkRefused, match=re.escape(reason)):
            await client.fork("t", at)
    with pytest.raises(ForkRefused, match="not a model reply"):
        await client.fork("t", 1, reply={"content": [{"type": "text", "text": "x"}]})
    with pytest.raises(ForkRefused, match="a turn is open there"):
        await client.fork("t", await seq_of(client, "t", "ToolFinished"), message="hi")
    with pytest.raises(ForkRefused, match="not both"):
        await client.fork("t", 1, message="hi", reply={"content": []})
    with pytest.raises(ForkRefused, match="not a valid model reply"):
        await client.fork("t", 3, reply={"content": [{"type": "picture"}]})
    with pytest.raises(ForkRefused, match="not JSON"):
        await client.fork("t", 3, reply="{")
    with pytest.raises(UnknownTask):
        await client.fork("nosuchtask", 1)
    await client.fork("t", 1, id="f")
    with pytest.raises(TaskExists):
        await client.fork("t", 1, id="f")
    assert {t.id for t in await client.tasks()} == {"f", "t"}  # nothing else was written


@pytest.mark.parametrize("name", NAMES)
def test_every_fork_point_of_a_golden_log_folds_as_its_prefix(name: str) -> None:
    log = read_log(name)
    points = fork_points(log)
    for at in range(1, len(log) + 1):
        if at not in points:
            with pytest.raises(ForkRefused):
                forked_events("golden", log, at, ForkChange())
            continue
        copied = forked_events("golden", log, at, ForkChange())
        stored = [StoredEvent("f", n, e.type, e.data, None) for n, e in enumerate(copied, 1)]  # type: ignore[arg-type]
        prefix = fold(LoggedEvent(e.seq, events.decode(e.type, e.data)) for e in log[:at])
        forked = fold(LoggedEvent(e.seq, events.decode(e.type, e.data)) for e in stored)
        assert forked.messages == prefix.messages, at
        assert plain(next_action(forked)) == plain(next_action(prefix)), at


async def test_the_forks_of_a_golden_log_are_stored_whole(client: AsyncClient) -> None:
    store = await client.store()
    source = read_log(GOLDEN)
    assert await store.create_task(NewTask("g", [NewEvent(e.type, e.data) for e in source]))
    for at in fork_points(source):
        handle = await client.fork("g", at, id=f"g{at}")
        forked = await store.read_log(handle.id)
        assert [(e.type, e.data) for e in forked[1:]] == [
            (e.type, e.data) for e in source[1:at] if e.type != "SubtaskOf"
        ]


def test_the_command_prints_the_fork_or_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    model = script(tmp_path, {"text": "4"})
    submitted = run(["submit", "2+2?", "--model", model, "--id", "t", "--store", url])
    assert submitted.returncode == 0, submitted.stderr
    forked = run(["fork", "t", "--at", "1", "--id", "f", "--store", url])
    assert (forked.returncode, forked.stdout.strip()) == (0, "f")
    bad = {
        ("fork", "t", "--at", "7"): "seq 7 is not in task t's log (seqs 1 to 1)",
        ("fork", "nosuch", "--at", "1"): "nosuch",
        ("fork", "t", "--at", "1", "--id", "f"): "exists already",
        ("fork", "t", "--at", "1", "--id", "no spaces"): "id",
        ("fork", "t", "--at", "x"): "'x' is not a valid integer",
        ("fork", "t", "--at", "1", "--reply-file", str(tmp_path / "none.json")): "none.json",
    }
    for arguments, said in bad.items():
        failed = run([*arguments, "--store", url])
        assert failed.returncode != 0, arguments
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (arguments, failed.stderr)
        assert "Traceback" not in failed.stderr


def run(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """`noeta ARGUMENTS`, run in this process (the same entry point, no interpreter start)."""
    return run_in_process(arguments, os.environ)


def test_a_reply_file_is_checked(tmp_path: Path) -> None:
    reply = tmp_path / "reply.json"
    reply.write_text(json.dumps({"content": "not a list"}))
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    model = script(tmp_path, {"text": "4"})
    assert run(["submit", "q", "--model", model, "--id", "t", "--store", url]).returncode == 0
    failed = run(["fork", "t", "--at", "1", "--reply-file", str(reply), "--store", url])
    assert failed.returncode != 0 and 'a "content" list' in failed.stderr


async def test_a_failed_agent_task_is_retried_from_its_last_good_step(
    client: AsyncClient, tmp_path: Path
) -> None:
    store = await client.store()
    cut = {"text": "and then", "stop": "max_tokens"}
    model = script(tmp_path, cut, cut, cut, {"text": "never"})
    await create(store, "t", model, prompt="go")
    registry = ProviderRegistry()
    runner = TaskRunner(store, registry, {})
    assert (await run_once(runner, store, "t")).state.finished == "failed"
    handle = await client.retry("t", id="again")
    log, retried = await store.read_log("t"), await store.read_log("again")
    at = retried[0].data["forked_at"]  # type: ignore[index]
    # The last step from which this code would call the model again: after two truncations.
    assert at == 5 and [e.type for e in log[:at]] == [e.type for e in retried]
    result = await run_once(runner, store, handle.id)
    assert result.state.last_turn_error.startswith("llm_truncated")  # the third, again
    provider, _ = await registry.provider_for(model)
    assert isinstance(provider, ScriptedProvider)
    assert len(provider.requests) == 4  # the source's three and the retry's one
    await create(store, "ok", script(tmp_path, {"text": "fine"}), prompt="go")
    await run_once(runner, store, "ok")
    with pytest.raises(NoetaError, match="task ok is done: it ran to its end"):
        await client.retry("ok")


async def test_a_done_agent_task_runs_again_with_force_from_its_last_good_step(
    client: AsyncClient, tmp_path: Path
) -> None:
    store = await client.store()
    await create(store, "t", script(tmp_path, CALL, {"text": "done"}), prompt="go", tools=("Echo",))
    echo, registry = Echo(), ProviderRegistry()
    runner = TaskRunner(store, registry, {"Echo": echo})
    await run_once(runner, store, "t")
    with pytest.raises(NoetaError, match=r"only a failed or cancelled task \(or, with --force"):
        await client.retry("t")
    handle = await client.retry("t", force=True)
    assert handle.id == "t.retry-1"
    created = (await store.read_log(handle.id))[0]
    # After the tool's result: the step from which this code calls the model again.
    assert created.data["forked_at"] == await seq_of(client, "t", "ToolFinished")  # type: ignore[index]
    result = await run_once(runner, store, handle.id)
    assert (result.state.finished, result.state.last_answer) == ("done", "done")
    assert echo.runs == ["t:c1"]  # the tool did not run again
    assert (await client.retry("t", force=True)).id != "t.retry-2"  # a second: an id of its own

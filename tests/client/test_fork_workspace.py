"""A fork's workspace (issue 30 item 1, ADR-0096), on sqlite and PostgreSQL: `copy` starts
the fork in a copy of its source's files, made by the worker that first runs it before any
step; a source whose workspace is not on that host fails the fork, saying so; a noeta that
predates the copy leaves such a fork alone; `fresh` stores the fork as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.client import AsyncClient, ForkRefused
from noeta.config import Config
from noeta.core.ports.store import TaskStatus
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import Read
from noeta.plugins.core.workspace_copy import WorkspaceCopies
from noeta.plugins.core.worktrees import Worktrees
from noeta.plugins.toolbox import Toolbox
from tests.client.test_fork import run
from tests.core.runner.test_runner import Echo, create, run_once, script
from tests.plugins.core.test_workspace_copy import UNCONFINED, git

CALL = {"tool_calls": [{"id": "c1", "name": "Echo", "input": {"text": "a"}}]}
READ = {"tool_calls": [{"id": "r1", "name": "Read", "input": {"file_path": "notes.txt"}}]}


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[AsyncClient]:
    await (await open_store(store_url, migrate=True)).close()
    async with AsyncClient(store_url, start_embedded=False) as client:
        yield client


async def source_and_runner(client: AsyncClient, tmp_path: Path) -> tuple[TaskRunner, int]:
    """Task "t" run to its end on a runner with workspaces under tmp_path/workspaces; the
    fork (a message where its turn ended) reads notes.txt and answers."""
    store = await client.store()
    model = script(tmp_path, CALL, {"text": "done"}, READ, {"text": "read it"})
    await create(store, "t", model, prompt="go", tools=("Echo", "Read"))
    runner = TaskRunner(
        store,
        ProviderRegistry(),
        {"Echo": Echo(), "Read": Read()},
        workspaces=str(tmp_path / "workspaces"),
        workspace_copier=WorkspaceCopies(Worktrees(UNCONFINED)),
    )
    assert (await run_once(runner, store, "t")).state.finished == "done"
    log = await store.read_log("t")
    return runner, next(e.seq for e in log if e.type == "TurnEnded")


async def test_a_fork_with_a_copied_workspace_reads_the_source_files(
    client: AsyncClient, tmp_path: Path
) -> None:
    runner, at = await source_and_runner(client, tmp_path)
    (tmp_path / "workspaces" / "t").mkdir(parents=True)
    (tmp_path / "workspaces" / "t" / "notes.txt").write_text("written by the source\n")
    await client.fork("t", at, id="f", message="read notes.txt", workspace="copy")
    store = await client.store()
    created = (await store.read_log("f"))[0].data
    assert isinstance(created, dict)
    assert (created["v"], created["workspace_from"]) == (events.WORKSPACE_COPY_VERSION, "t")
    result = await run_once(runner, store, "f")
    assert (result.state.finished, result.state.last_answer) == ("done", "read it")
    read = [e.data for e in await store.read_log("f") if e.type == "ToolFinished"][-1]
    assert "written by the source" in str(read)  # the copy was there before the first step


async def test_a_fork_whose_source_workspace_is_not_here_fails_saying_so(
    client: AsyncClient, tmp_path: Path
) -> None:
    runner, at = await source_and_runner(client, tmp_path)  # "t" never made its folder
    await client.fork("t", at, id="f", message="read notes.txt", workspace="copy")
    store = await client.store()
    result = await run_once(runner, store, "f")
    assert result.state.finished == "failed"
    record = await store.get_task("f")
    assert record is not None and record.status is TaskStatus.FAILED
    finished = (await store.read_log("f"))[-1]
    assert finished.type == "TaskFinished"
    error = str(finished.data["error"])  # type: ignore[index]
    assert error.startswith("workspace_not_copied: task t's workspace: there is none on this host")
    assert "ModelCalled" not in [e.type for e in (await store.read_log("f"))[at:]]


async def test_a_noeta_that_predates_the_copy_leaves_the_fork_alone(
    client: AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, at = await source_and_runner(client, tmp_path)
    (tmp_path / "workspaces" / "t").mkdir(parents=True)
    await client.fork("t", at, id="f", message="read notes.txt", workspace="copy")
    # What a noeta without the copy knows of a TaskCreated: versions up to 2.
    monkeypatch.setattr(events, "WORKSPACE_COPY_VERSION", events.WORKER_TOOLS_VERSION)
    monkeypatch.setitem(events._NEWEST_VERSION, events.TaskCreated, events.WORKER_TOOLS_VERSION)
    store = await client.store()
    result = await run_once(runner, store, "f")
    assert result.outcome == "left_for_newer"
    assert not (tmp_path / "workspaces" / "f").exists()
    assert len(await store.read_log("f")) == at + 1  # nothing written


async def test_a_fresh_fork_is_stored_as_before_and_a_fork_of_a_copy_copies_its_own_source(
    client: AsyncClient, tmp_path: Path
) -> None:
    _, at = await source_and_runner(client, tmp_path)
    await client.fork("t", at, id="fresh")
    await client.fork("t", at, id="copied", workspace="copy")
    store = await client.store()
    source = (await store.read_log("t"))[0].data
    fresh = (await store.read_log("fresh"))[0].data
    assert isinstance(source, dict) and isinstance(fresh, dict)
    assert fresh == {**source, "forked_from": "t", "forked_at": at}
    copied_log = await store.read_log("copied")
    await client.fork("copied", len(copied_log), id="again")
    again = (await store.read_log("again"))[0].data
    assert isinstance(again, dict) and "workspace_from" not in again
    await client.fork("copied", len(copied_log), id="again2", workspace="copy")
    again2 = (await store.read_log("again2"))[0].data
    assert isinstance(again2, dict) and again2["workspace_from"] == "copied"
    with pytest.raises(ForkRefused, match="a fork's workspace is fresh or copy, not 'foo'"):
        await client.fork("t", at, id="bad", workspace="foo")


def test_the_command_takes_fresh_or_copy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    model = script(tmp_path, {"text": "4"})
    submitted = run(["submit", "2+2?", "--model", model, "--id", "t", "--store", url])
    assert submitted.returncode == 0, submitted.stderr
    forked = run(["fork", "t", "--at", "1", "--id", "f", "--workspace", "copy", "--store", url])
    assert (forked.returncode, forked.stdout.strip()) == (0, "f"), forked.stderr
    failed = run(["fork", "t", "--at", "1", "--workspace", "foo", "--store", url])
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode != 0 and len(lines) == 1 and "'foo' is not one of" in lines[0]
    helped = run(["fork", "--help"])
    assert "not versioned by the log" in " ".join(helped.stdout.split())


async def test_a_workers_toolbox_copies_a_git_workspace_onto_the_forks_branch(
    client: AsyncClient, tmp_path: Path
) -> None:
    """The worker's own wiring: the core plugin's copier, its git confined as configured."""
    workspaces = tmp_path / "workspaces"
    box = await Toolbox.open(Config(workspaces=str(workspaces)))
    try:
        store = await client.store()
        model = script(tmp_path, CALL, {"text": "done"}, READ, {"text": "read it"})
        await create(store, "t", model, prompt="go", tools=("Echo", "Read"))
        runner = box.runner(store, ProviderRegistry())
        runner.tools = {**runner.tools, "Echo": Echo()}
        assert (await run_once(runner, store, "t")).state.finished == "done"
        source = workspaces / "t"
        source.mkdir(parents=True)
        git(source, "init", "-q", "-b", "work")
        (source / "notes.txt").write_text("committed\n")
        git(source, "add", "-A")
        git(source, "commit", "-q", "-m", "one")
        (source / "notes.txt").write_text("written by the source, not committed\n")
        at = next(e.seq for e in await store.read_log("t") if e.type == "TurnEnded")
        await client.fork("t", at, id="f", message="read notes.txt", workspace="copy")
        result = await run_once(runner, store, "f")
        assert (result.state.finished, result.state.last_answer) == ("done", "read it")
        read = [e.data for e in await store.read_log("f") if e.type == "ToolFinished"][-1]
        assert "written by the source, not committed" in str(read)
        assert git(workspaces / "f", "rev-parse", "--abbrev-ref", "HEAD").strip() == "fork/f"
        assert git(workspaces / "f", "status", "--porcelain").strip() == "M notes.txt"
    finally:
        await box.close()

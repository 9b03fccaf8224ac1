"""Subagents end to end with the scripted model, on sqlite and PostgreSQL: the Agent tool
launches children (in parallel, nested), their handbacks resume the parent's turn, and
every limit and bad input ends in a clear error result, nothing lost or doubled."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.store import CANCEL_KEY, Delivery, NewEvent, NewTask, Store, TaskStatus
from noeta.core.ports.tool import Tool
from noeta.core.rules import events, subtasks
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import Agent, Write

LEASE = 60.0


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def script(tmp_path: Path, *replies: dict[str, Any]) -> str:
    path = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.yaml"
    path.write_text(json.dumps({"replies": list(replies)}))  # JSON is YAML
    return f"scripted:{path}"


def agent(call_id: str, prompt: str, **more: Any) -> dict[str, Any]:
    return {"id": call_id, "name": "Agent", "input": {"prompt": prompt, **more}}


def runner(store: Store, workspaces: str = "") -> TaskRunner:
    tools: dict[str, Tool] = {"Agent": Agent(), "Write": Write()}
    # The children run scripts of their own: the operator of these tests allows them.
    return TaskRunner(
        store, ProviderRegistry(), tools, workspaces=workspaces, subagent_models=("scripted:*",)
    )


async def create(
    store: Store, task_id: str, model: str, *more: events.Event, **config: Any
) -> None:
    config.setdefault("tools", ("Agent", "Write"))
    created = events.TaskCreated(model=model, prompt="go", **config)
    logged = [NewEvent(*events.encode(e)) for e in (created, *more)]
    assert await store.create_task(NewTask(task_id, logged))


async def run_all(store: Store, task_runner: TaskRunner, rounds: int = 200) -> list[str]:
    """Claim and run whatever is claimable until nothing is; the ids run, in order."""
    ran: list[str] = []
    for _ in range(rounds):
        claim = await store.claim("worker-1", ["default"], LEASE)
        if claim is None:
            return ran
        ran.append(claim.task_id)
        await task_runner.run(claim)
    raise AssertionError(f"still running after {rounds} claims: {ran[-10:]}")


async def log_of(store: Store, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.data) for e in await store.read_log(task_id)]  # type: ignore[misc]


def finished_calls(log: list[tuple[str, dict[str, Any]]]) -> dict[str, tuple[str, bool]]:
    return {
        data["call_id"]: (data["content"], data["is_error"])
        for kind, data in log
        if kind == "ToolFinished"
    }


async def status(store: Store, task_id: str) -> TaskStatus:
    record = await store.get_task(task_id)
    assert record is not None, task_id
    return record.status


async def test_three_subagents_one_nested_hand_back_and_the_parent_turn_continues(
    store: Store, tmp_path: Path
) -> None:
    grandchild = script(tmp_path, {"text": "C found it"})
    child_a = script(
        tmp_path,
        {"tool_calls": [agent("g1", "dig deeper", model=grandchild)]},
        {"text": "A done"},
    )
    child_b = script(tmp_path, {"text": "B done"})
    parent = script(
        tmp_path,
        {"tool_calls": [agent("a", "part A", model=child_a), agent("b", "part B", model=child_b)]},
        {"text": "all done"},
    )
    await create(store, "p", parent)
    await run_all(store, runner(store))

    assert await status(store, "p") == TaskStatus.DONE
    for child in ("p.a.1", "p.b.2", "p.a.1.g1.1"):
        assert await status(store, child) == TaskStatus.DONE
    log = await log_of(store, "p")
    launched = [data["child_id"] for kind, data in log if kind == "SubtaskLaunched"]
    assert launched == ["p.a.1", "p.b.2"]  # both launched before the parent waited
    assert finished_calls(log) == {"a": ("A done", False), "b": ("B done", False)}
    returned = [data["child_id"] for kind, data in log if kind == "SubtaskReturned"]
    assert sorted(returned) == ["p.a.1", "p.b.2"]
    finish = {"v": 1, "status": "done", "answer": "all done", "error": ""}
    assert log[-1] == ("TaskFinished", finish)
    # The child knows its parent and depth; the nested one is two levels down.
    assert (
        "SubtaskOf",
        {"v": 1, "parent": "p", "call_id": "a", "depth": 1, "trace": ""},
    ) in await log_of(store, "p.a.1")
    nested = await log_of(store, "p.a.1.g1.1")
    assert (
        "SubtaskOf",
        {"v": 1, "parent": "p.a.1", "call_id": "g1", "depth": 2, "trace": ""},
    ) in nested
    assert finished_calls(await log_of(store, "p.a.1")) == {"g1": ("C found it", False)}
    # Every handback was taken exactly once.
    for task_id in ("p", "p.a.1"):
        assert all(e.taken_seq for e in await store.read_inbox(task_id, untaken_only=False))


async def test_a_failed_child_hands_back_its_failure_and_the_parent_goes_on(
    store: Store, tmp_path: Path
) -> None:
    failing = script(tmp_path)  # no replies at all: its model call fails for good
    parent = script(tmp_path, {"tool_calls": [agent("a", "try", model=failing)]}, {"text": "noted"})
    await create(store, "p", parent)
    await run_all(store, runner(store))
    assert await status(store, "p.a.1") == TaskStatus.FAILED
    assert await status(store, "p") == TaskStatus.DONE
    content, is_error = finished_calls(await log_of(store, "p"))["a"]
    assert is_error and content.startswith("The subagent p.a.1 failed: llm_error")


async def test_cancelling_a_parent_cancels_its_running_children(
    store: Store, tmp_path: Path
) -> None:
    child = script(tmp_path, {"text": "never"})
    parent = script(tmp_path, {"tool_calls": [agent("a", "work", model=child)]}, {"text": "x"})
    await create(store, "p", parent)
    task_runner = runner(store)
    claim = await store.claim_task("worker-1", "p", LEASE)
    assert claim is not None
    assert (await task_runner.run(claim)).outcome == "waiting"
    assert await store.deliver(Delivery("p", {"kind": "cancel"}, CANCEL_KEY))
    claim = await store.claim_task("worker-1", "p", LEASE)
    assert claim is not None
    await task_runner.run(claim)
    assert await status(store, "p") == TaskStatus.CANCELLED
    await run_all(store, task_runner)
    assert await status(store, "p.a.1") == TaskStatus.CANCELLED
    # The child's report went to the finished parent's inbox, once.
    (handback,) = await store.read_inbox("p")
    assert handback.dedupe_key == subtasks.handback_key("p", "a")
    assert subtasks.read_handback(handback.payload) == subtasks.Handback(
        "p.a.1", "a", "cancelled", "cancelled on request"
    )


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (agent("a", "x", model="nope:thing"), "Agent cannot use the model 'nope:thing'"),
        (agent("a", "x", tools=["Write", "Bash"]), "it has no 'Bash'"),
        (agent("a", ""), "invalid input for Agent: prompt"),
        (agent("a", "   "), "Agent needs a prompt"),
        (agent("a", "x", workspace="worktree"), "workspace 'worktree' needs a git repository"),
        (agent("a", "x", workspace="elsewhere"), "invalid input for Agent: workspace"),
    ],
)
async def test_bad_agent_input_is_an_error_result_and_starts_no_child(
    store: Store, tmp_path: Path, call: dict[str, Any], expected: str
) -> None:
    parent = script(tmp_path, {"tool_calls": [call]}, {"text": "ok"})
    await create(store, "p", parent)
    await run_all(store, runner(store, str(tmp_path / "ws")))
    assert await status(store, "p") == TaskStatus.DONE
    content, is_error = finished_calls(await log_of(store, "p"))["a"]
    assert is_error and expected in content, content
    assert await store.get_task("p.a.1") is None


async def test_a_task_at_the_depth_limit_launches_no_subagent(store: Store, tmp_path: Path) -> None:
    parent = script(tmp_path, {"tool_calls": [agent("a", "x")]}, {"text": "ok"})
    at_limit = events.SubtaskOf("up", "c", subtasks.MAX_SUBTASK_DEPTH)
    await create(store, "up", script(tmp_path), interactive=True)
    await create(store, "deep", parent, at_limit)
    task_runner = runner(store)
    claim = await store.claim_task("worker-1", "deep", LEASE)
    assert claim is not None
    await task_runner.run(claim)
    content, is_error = finished_calls(await log_of(store, "deep"))["a"]
    assert is_error and subtasks.TOO_DEEP in content
    assert await store.get_task("deep.a.1") is None


async def test_children_per_turn_and_per_task_limits_are_reached(
    store: Store, tmp_path: Path
) -> None:
    child = script(tmp_path, {"text": "ok"})
    per_turn = subtasks.MAX_CHILDREN_PER_TURN
    first = [agent(f"a{i}", "x", model=child) for i in range(per_turn + 1)]
    second = [agent(f"b{i}", "x", model=child) for i in range(per_turn)]
    parent = script(
        tmp_path,
        {"tool_calls": first},
        {"text": "turn 1"},
        {"tool_calls": second},
        {"text": "turn 2"},
        {"tool_calls": [agent("c", "x", model=child)]},
        {"text": "turn 3"},
    )
    await create(store, "p", parent, interactive=True)
    task_runner = runner(store)
    await run_all(store, task_runner)
    for number in (2, 3):
        await store.deliver(Delivery("p", {"text": "more"}, f"message:{number}"))
        await run_all(store, task_runner)
    finished = finished_calls(await log_of(store, "p"))
    assert finished[f"a{per_turn}"] == (f"Agent refused: {subtasks.TOO_MANY_THIS_TURN}", True)
    assert all(not finished[f"a{i}"][1] for i in range(per_turn))
    assert all(not finished[f"b{i}"][1] for i in range(per_turn))
    assert per_turn * 2 == subtasks.MAX_CHILDREN_PER_TASK
    assert finished["c"] == (f"Agent refused: {subtasks.TOO_MANY}", True)


def git(cwd: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *arguments], check=True, capture_output=True, text=True
    ).stdout


def git_workspace(root: Path, task_id: str) -> Path:
    workspace = root / task_id
    workspace.mkdir(parents=True)
    git(workspace, "init", "-q")
    (workspace / "README").write_text("hello\n")
    git(workspace, "add", "README")
    git(workspace, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    return workspace


async def test_in_a_git_workspace_a_child_works_in_its_own_worktree_and_it_is_removed(
    store: Store, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    workspace = git_workspace(root, "p")
    write = {"id": "w", "name": "Write", "input": {"file_path": "found.txt", "content": "42\n"}}
    child = script(tmp_path, {"tool_calls": [write]}, {"text": "wrote found.txt"})
    parent = script(tmp_path, {"tool_calls": [agent("a", "x", model=child)]}, {"text": "ok"})
    await create(store, "p", parent)
    await run_all(store, runner(store, str(root)))

    assert await status(store, "p") == TaskStatus.DONE
    assert not (root / "p.a.1").exists()  # the worktree is gone once it handed back
    assert "p.a.1" not in git(workspace, "worktree", "list")
    # Its work stays on its branch.
    assert git(workspace, "show", "noeta/p.a.1:found.txt") == "42\n"
    assert not (workspace / "found.txt").exists()


async def test_a_child_whose_parent_was_cancelled_first_removes_its_own_worktree(
    store: Store, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    workspace = git_workspace(root, "p")
    child = script(tmp_path, {"text": "never"})
    parent = script(tmp_path, {"tool_calls": [agent("a", "x", model=child)]}, {"text": "ok"})
    await create(store, "p", parent)
    task_runner = runner(store, str(root))
    claim = await store.claim_task("worker-1", "p", LEASE)
    assert claim is not None
    assert (await task_runner.run(claim)).outcome == "waiting"
    (root / "p.a.1" / "half.txt").write_text("half done\n")  # what the child wrote so far
    assert await store.deliver(Delivery("p", {"kind": "cancel"}, CANCEL_KEY))
    claim = await store.claim_task("worker-1", "p", LEASE)  # the parent finishes first
    assert claim is not None
    await task_runner.run(claim)
    assert await status(store, "p") == TaskStatus.CANCELLED
    assert (root / "p.a.1").is_dir()
    await run_all(store, task_runner)
    assert await status(store, "p.a.1") == TaskStatus.CANCELLED
    # No one takes the handback (the parent is finished): the child removed its worktree.
    assert not (root / "p.a.1").exists()
    assert "p.a.1" not in git(workspace, "worktree", "list")
    assert git(workspace, "show", "noeta/p.a.1:half.txt") == "half done\n"


async def test_a_grandchild_finishing_after_its_parent_removes_its_worktree_all_the_same(
    store: Store, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    workspace = git_workspace(root, "p")
    grandchild = script(tmp_path, {"text": "never"})
    child = script(tmp_path, {"tool_calls": [agent("n", "x", model=grandchild)]}, {"text": "b"})
    parent = script(tmp_path, {"tool_calls": [agent("b", "x", model=child)]}, {"text": "ok"})
    await create(store, "p", parent)
    task_runner = runner(store, str(root))
    for task_id in ("p", "p.b.1"):  # each launches its child and waits
        claim = await store.claim_task("worker-1", task_id, LEASE)
        assert claim is not None
        assert (await task_runner.run(claim)).outcome == "waiting"
    assert (root / "p.b.1.n.1" / ".git").is_file()
    assert await store.deliver(Delivery("p", {"kind": "cancel"}, CANCEL_KEY))
    for task_id in ("p", "p.b.1", "p.b.1.n.1"):  # the cancel goes down, in this order
        claim = await store.claim_task("worker-1", task_id, LEASE)
        assert claim is not None
        await task_runner.run(claim)
        assert await status(store, task_id) == TaskStatus.CANCELLED
    # The grandchild's parent worktree was gone before it finished: its own went too.
    assert not (root / "p.b.1").exists()
    assert not (root / "p.b.1.n.1").exists()
    assert git(workspace, "worktree", "list").count("\n") == 1


async def test_a_worktree_path_that_exists_already_is_refused(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    git_workspace(root, "p")
    (root / "p.a.1").mkdir()
    (root / "p.a.1" / "mine").write_text("keep me")
    parent = script(tmp_path, {"tool_calls": [agent("a", "x")]}, {"text": "ok"})
    await create(store, "p", parent)
    await run_all(store, runner(store, str(root)))
    content, is_error = finished_calls(await log_of(store, "p"))["a"]
    assert is_error and "exists already" in content
    assert (root / "p.a.1" / "mine").read_text() == "keep me"
    assert await store.get_task("p.a.1") is None


def test_child_ids_follow_the_task_id_rule_and_fall_back_to_a_hash() -> None:
    assert subtasks.child_id("t", "toolu_01AB", 3) == "t.toolu_01AB.3"
    hashed = subtasks.child_id("t", "call/with spaces", 1)
    assert hashed.startswith("t.c") and len(hashed) == len("t.c") + 12 + 2
    long_call = "x" * 126
    assert subtasks.child_id("t", long_call, 1).startswith("t.c")
    with pytest.raises(ValueError, match="over 128 characters"):
        subtasks.child_id("t" * 120, "call-with-a-long-id", 1)


def test_a_call_id_with_dots_is_hashed_so_the_parent_is_the_id_before_the_last_two_dots() -> None:
    child = subtasks.child_id("p", "call.with.dots", 1)
    assert child.startswith("p.c") and child.count(".") == 2
    assert child.rsplit(".", 2)[0] == "p"


async def test_a_task_with_its_workers_tools_gives_a_subagent_a_subset_of_them(
    store: Store, tmp_path: Path
) -> None:
    child = script(tmp_path, {"text": "wrote"})
    calls = [
        agent("a", "x", tools=["Write"], model=child),
        agent("b", "y", tools=["Write", "Bash"], model=child),
    ]
    parent = script(tmp_path, {"tool_calls": calls}, {"text": "ok"})
    await create(store, "p", parent, tools=None)  # the worker's: Agent and Write
    await run_all(store, runner(store))
    finished = finished_calls(await log_of(store, "p"))
    assert finished["a"] == ("wrote", False)
    assert finished["b"][1] and "it has no 'Bash'" in finished["b"][0]
    assert await status(store, "p") == TaskStatus.DONE

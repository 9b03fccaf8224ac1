"""The models an Agent call may name are the operator's choice (ADR-0076), through real tool
calls from a scripted model: a model outside `subagent_models` is an error result and
nothing is opened; where `scripted:` is allowed, the script is opened off the event loop,
as a regular file of bounded size, and no failure says whether a file exists or what it
holds."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.store import Store, TaskStatus
from noeta.core.ports.tool import Tool
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import Agent, Write
from tests.core.runner.test_subtasks import (
    agent,
    create,
    finished_calls,
    log_of,
    run_all,
    script,
    status,
)

SECRET = "hunter2-s3cret: {not yaml"  # what a password file holds; must never be echoed


@pytest.fixture
async def store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Store]:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'noeta.db'}"
    store = await open_store(url, migrate=True)
    yield store
    await store.close()


def runner(store: Store, *allowed: str) -> TaskRunner:
    tools: dict[str, Tool] = {"Agent": Agent(), "Write": Write()}
    return TaskRunner(store, ProviderRegistry(), tools, subagent_models=allowed)


async def agent_result(
    store: Store, tmp_path: Path, model: str, *allowed: str, task_id: str = "p"
) -> str:
    """Run a parent whose one Agent call names `model`; the call's result (an error)."""
    parent = script(tmp_path, {"tool_calls": [agent("a", "x", model=model)]}, {"text": "ok"})
    await create(store, task_id, parent)
    await run_all(store, runner(store, *allowed))
    assert await status(store, task_id) == TaskStatus.DONE
    content, is_error = finished_calls(await log_of(store, task_id))["a"]
    assert is_error, content
    assert await store.get_task(f"{task_id}.a.1") is None  # no child
    return content


async def test_a_model_the_operator_does_not_allow_is_refused_and_its_file_never_opened(
    store: Store, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened for reading, it would block until a writer came: none will
    content = await agent_result(store, tmp_path, f"scripted:{fifo}", "anthropic:claude-x")
    assert content == (
        f"Agent cannot use the model 'scripted:{fifo}': the operator allows only "
        "this task's own model and anthropic:claude-x"
    )


async def test_by_default_only_the_tasks_own_model_is_allowed(store: Store, tmp_path: Path) -> None:
    content = await agent_result(store, tmp_path, "anthropic:claude-x")
    assert content == (
        "Agent cannot use the model 'anthropic:claude-x': the operator allows only "
        "this task's own model"
    )


async def test_an_allowed_model_and_the_tasks_own_model_work(store: Store, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    child = script(scripts, {"text": "child done"})
    parent = script(
        tmp_path,
        {"tool_calls": [agent("a", "x", model=child), agent("b", "y")]},
        {"text": "child done"},  # also the reply of b's child, which runs the parent's script
    )
    await create(store, "p", parent)
    await run_all(store, runner(store, f"scripted:{scripts}/*"))
    assert await status(store, "p") == TaskStatus.DONE
    calls = finished_calls(await log_of(store, "p"))
    assert calls["a"] == ("child done", False)
    assert calls["b"][1] is False


async def test_a_fifo_named_as_a_script_fails_promptly_and_the_worker_goes_on(
    store: Store, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    content = await agent_result(store, tmp_path, f"scripted:{fifo}", "scripted:*")
    assert content == (
        f"Agent cannot use the model 'scripted:{fifo}': {fifo} is not a usable model script "
        "(a regular file of valid script YAML, at most 65536 bytes)"
    )


async def test_a_secret_file_named_as_a_script_says_neither_whether_it_exists_nor_what_it_holds(
    store: Store, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "password").write_text(SECRET)
    (home / "password").chmod(0o600)
    answers = []
    for name in ("password", "missing"):
        model = f"scripted:{home / name}"
        answer = await agent_result(store, tmp_path, model, "scripted:*", task_id=name)
        answers.append(answer.replace(name, "X"))
        log = json.dumps(await log_of(store, name))
        assert "hunter2" not in log and "s3cret" not in log and "not yaml" not in log
    assert answers[0] == answers[1]  # the same words for a file that exists and one that does not


async def test_an_oversize_script_is_refused(store: Store, tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    reply = {"text": "x" * 1000}
    big.write_text(json.dumps({"replies": [reply] * 1100}))  # about 1 MB, valid
    content = await agent_result(store, tmp_path, f"scripted:{big}", "scripted:*")
    assert content.endswith("is not a usable model script (a regular file of valid script YAML, "
                            "at most 65536 bytes)")  # fmt: skip


async def test_a_link_named_as_a_script_is_not_followed(store: Store, tmp_path: Path) -> None:
    target = script(tmp_path, {"text": "behind a link"}).removeprefix("scripted:")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)  # a task could point one at any file the worker can read
    content = await agent_result(store, tmp_path, f"scripted:{link}", "scripted:*")
    assert content.endswith(f"{link} is not a usable model script (a regular file of valid "
                            "script YAML, at most 65536 bytes)")  # fmt: skip

"""A real `noeta worker` with `subagent_models` in its config (ADR-0076): an Agent call
naming a FIFO in an allowed folder fails promptly while the worker's other tasks finish,
an allowed script runs, and a model not listed is refused in one line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from tests.worker.conftest import WorkerProcess, status_of, until


async def add_parent(store: Store, folder: Path, task_id: str, model: str) -> None:
    """A task whose one Agent call names `model`, then ends its turn."""
    call = {"id": "a", "name": "Agent", "input": {"prompt": "go", "model": model}}
    script = folder / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": [{"tool_calls": [call]}, {"text": "over"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Agent",))
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def agent_result(store: Store, task_id: str) -> tuple[str, bool]:
    for event in await store.read_log(task_id):
        data: Any = event.data
        if event.type == "ToolFinished" and data["call_id"] == "a":
            return data["content"], data["is_error"]
    raise AssertionError(f"{task_id}: no result for its Agent call")


async def test_a_worker_keeps_to_its_configured_models_and_a_fifo_freezes_nothing(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    os.mkfifo(scripts / "fifo")
    (scripts / "child.yaml").write_text(json.dumps({"replies": [{"text": "child done"}]}))
    config = tmp_path / "noeta.yaml"
    config.write_text(f'subagent_models:\n  - "scripted:{scripts}/*"\n')
    await add_parent(store, tmp_path, "fifo", f"scripted:{scripts / 'fifo'}")
    await add_parent(store, tmp_path, "ok", f"scripted:{scripts / 'child.yaml'}")
    await add_parent(store, tmp_path, "other", "openai:gpt-4o")
    workers(postgres_url, "w1", lease=30.0, env={"NOETA_CONFIG": str(config)})

    async def all_done() -> bool:
        return [await status_of(store, t) for t in ("fifo", "ok", "other")] == ["done"] * 3

    await until(all_done, "every parent finished", within=90)
    assert await agent_result(store, "ok") == ("child done", False)
    assert await agent_result(store, "fifo") == (
        f"Agent cannot use the model 'scripted:{scripts / 'fifo'}': {scripts / 'fifo'} is not "
        "a usable model script (a regular file of valid script YAML, at most 65536 bytes)",
        True,
    )
    assert await agent_result(store, "other") == (
        "Agent cannot use the model 'openai:gpt-4o': the operator allows only this task's "
        f"own model and scripted:{scripts}/*",
        True,
    )

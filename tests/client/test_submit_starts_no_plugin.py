"""`submit()` and `submit_many()` start no plugin: a task submitted without `tools=` is
given every tool of the plugins its worker pins, so the client has no names to learn,
and an MCP server configured in the client's config is never started by a submit; the
worker that runs the task offers the server's tools as before."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.rules import events
from tests.worker.conftest import WorkerProcess

SERVER = str(Path(__file__).parents[1] / "plugins" / "mcp" / "server.py")


def mcp_config(folder: Path, pid_file: Path) -> Path:
    """A config whose one plugin is an MCP server that writes `pid_file` once started."""
    server = {
        "command": sys.executable,
        "args": [SERVER],
        "env": {
            "NOETA_TEST_LEDGER": str(folder / "ledger.jsonl"),
            "NOETA_TEST_PID_FILE": str(pid_file),
        },
    }
    config = folder / "noeta.yaml"
    plugin = {"module": "noeta.plugins.mcp", "params": {"servers": {"test": server}}}
    config.write_text(json.dumps({"plugins": [plugin]}))
    return config


def script(folder: Path) -> str:
    """One call of the MCP server's add tool, then the answer."""
    call = {"id": "c1", "name": "mcp__test__add", "input": {"a": 2, "b": 3}}
    replies = [{"text": "adding", "tool_calls": [call]}, {"text": "five"}]
    path = folder / "model.yaml"
    path.write_text(json.dumps({"replies": replies}))
    return f"scripted:{path}"


async def created_event(client: AsyncClient, task_id: str) -> events.TaskCreated:
    first = (await (await client.store()).read_log(task_id))[0]
    created = events.decode(first.type, first.data)
    assert isinstance(created, events.TaskCreated)
    return created


async def test_submit_starts_no_mcp_server_and_the_worker_offers_its_tools(
    postgres_url: str, tmp_path: Path
) -> None:
    await (await open_store(postgres_url, migrate=True)).close()
    client_pid_file = tmp_path / "client-server.pid"
    client_config = mcp_config(tmp_path, client_pid_file)
    model = script(tmp_path)
    async with AsyncClient(postgres_url, config=str(client_config)) as client:
        one = await client.submit("add 2 and 3", model=model, queue="mcp", id="one")
        (two,) = await client.submit_many(["add 2 and 3"], model=model, queue="mcp")
        assert not client_pid_file.exists()  # no server was started to learn tool names
        assert (await created_event(client, "one")).tools is None
        assert (await created_event(client, two.id)).tools is None

        worker_folder = tmp_path / "worker"
        worker_folder.mkdir()
        worker_config = mcp_config(worker_folder, worker_folder / "server.pid")
        worker = WorkerProcess(postgres_url, "w", worker_folder, queues="mcp", config=worker_config)
        try:
            assert await client.result(one, timeout=60) == "five"
            assert await client.result(two, timeout=60) == "five"
        finally:
            worker.stop()
    assert not client_pid_file.exists()
    assert (worker_folder / "server.pid").exists()

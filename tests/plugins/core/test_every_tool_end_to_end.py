"""A scripted task that uses every built-in tool, end to end through the runner."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.config import Config
from noeta.plugins.loading import PluginSpec
from noeta.plugins.toolbox import Toolbox
from tests.core.runner.test_runner import create, run_once


class Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body><p>noeta fetched this</p></body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def web() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/page"
    server.shutdown()
    server.server_close()


def call(number: int, name: str, **input: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": f"c{number}", "name": name, "input": input}]}


async def test_a_task_uses_every_built_in_tool(store_url: str, tmp_path: Path, web: str) -> None:
    replies = [
        call(1, "Write", file_path="notes/a.txt", content="alpha\nbeta\n"),
        call(2, "Read", file_path="notes/a.txt"),
        call(3, "Edit", file_path="notes/a.txt", old_string="beta", new_string="gamma"),
        call(4, "Glob", pattern="**/*.txt"),
        call(5, "Grep", pattern="gam+a"),
        call(6, "Bash", command="cat notes/a.txt && printf 'nul:\\000!'"),
        call(7, "WebFetch", url=web),
        call(8, "TodoWrite", todos=[{"content": "check", "status": "completed"}]),
        call(9, "ToolSearch", query="search files"),
        {"text": "all done"},
    ]
    script = tmp_path / "every-tool.yaml"
    script.write_text(json.dumps({"replies": replies}))
    config = Config(
        # The page is on loopback, which WebFetch refuses unless the operator opens it.
        plugins=(PluginSpec("module", "noeta.plugins.core", {"fetch_allow": ["127.0.0.1"]}),),
        workspaces=str(tmp_path / "workspaces"),
    )
    toolbox = await Toolbox.open(config)
    store = await open_store(store_url, migrate=True)
    try:
        await create(
            store, "t", f"scripted:{script}", prompt="use them all", tools=tuple(toolbox.tools)
        )
        from noeta.core.runner.task import TaskRunner

        runner = TaskRunner(
            store,
            ProviderRegistry(),
            toolbox.tools,
            workspaces=toolbox.workspaces,
            pins=toolbox.pins,
        )
        result = await run_once(runner, store, "t")
        finished = [e.data for e in await store.read_log("t") if e.type == "ToolFinished"]
    finally:
        await store.close()
        await toolbox.close()
    assert (result.state.finished, result.state.last_answer) == ("done", "all done")
    assert len(finished) == 9
    errors = [(f["call_id"], f["content"]) for f in finished if f["is_error"]]  # type: ignore[index]
    assert errors == []
    by_call = {f["call_id"]: f["content"] for f in finished}  # type: ignore[index]
    assert "gamma" in by_call["c6"] and "noeta fetched this" in by_call["c7"]
    assert (tmp_path / "workspaces" / "t" / "notes" / "a.txt").read_text() == "alpha\ngamma\n"

"""The MCP plugin against a real MCP server (tests/plugins/mcp/server.py) over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import OUTCOME_UNKNOWN, Tool, ToolContext, ToolError
from noeta.plugins import mcp_server
from noeta.plugins.mcp import McpPlugin, McpServerError, plugin, tool_name
from tests.worker.conftest import until

SERVER = str(Path(__file__).with_name("server.py"))
CTX = ToolContext(task_id="task-1", call_id="call-7")


def server_spec(tmp_path: Path, **extra: JSONValue) -> dict[str, JSONValue]:
    env: dict[str, JSONValue] = {
        "NOETA_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        "NOETA_TEST_PID_FILE": str(tmp_path / "server.pid"),
    }
    return {"command": sys.executable, "args": [SERVER], "env": env, **extra}


def server_pid(tmp_path: Path) -> int:
    return int((tmp_path / "server.pid").read_text())


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def by_name(started: McpPlugin) -> dict[str, Tool]:
    return {tool.name: tool for tool in started.tools()}


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[McpPlugin]:
    mcp = plugin({"servers": {"test": server_spec(tmp_path)}})
    await mcp.start()
    yield mcp
    await mcp.close()


async def test_tools_are_listed_with_names_descriptions_and_schemas(started: McpPlugin) -> None:
    tools = by_name(started)
    assert set(tools) == {
        "mcp__test__add",
        "mcp__test__record",
        "mcp__test__fail",
        "mcp__test__picture",
        "mcp__test__sleep",
        "mcp__test__hang",
        "mcp__test__read_resource",
    }
    add = tools["mcp__test__add"]
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.input_schema["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }


async def test_a_call_returns_the_result(started: McpPlugin) -> None:
    output = await by_name(started)["mcp__test__add"].run({"a": 2, "b": 3}, CTX)
    assert (output.content, output.is_error) == ("5", False)


async def test_the_idempotency_key_arrives_in_meta(started: McpPlugin, tmp_path: Path) -> None:
    output = await by_name(started)["mcp__test__record"].run({"text": "hello"}, CTX)
    assert output.content == "recorded hello"
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"idempotency_key": CTX.idempotency_key, "text": "hello"}
    ]
    assert CTX.idempotency_key == "task-1:call-7"


async def test_an_error_result_is_an_error(started: McpPlugin) -> None:
    output = await by_name(started)["mcp__test__fail"].run({}, CTX)
    assert (output.content, output.is_error) == ("it broke", True)


async def test_non_text_blocks_are_summarized(started: McpPlugin) -> None:
    output = await by_name(started)["mcp__test__picture"].run({}, CTX)
    assert output.content == "a picture\n[image/png, 5 bytes]"


async def test_resources_are_read_by_a_retry_safe_tool(started: McpPlugin) -> None:
    tools = by_name(started)
    read = tools.pop("mcp__test__read_resource")
    assert read.flags.retry_safe
    assert "note://greeting" in read.description
    assert not any(tool.flags.retry_safe for tool in tools.values())
    output = await read.run({"uri": "note://greeting"}, CTX)
    assert (output.content, output.is_error) == ("hello from the test server", False)
    with pytest.raises(ToolError, match="note://missing"):
        await read.run({"uri": "note://missing"}, CTX)


async def test_a_slow_call_times_out(tmp_path: Path) -> None:
    mcp = plugin({"servers": {"test": server_spec(tmp_path, timeout_seconds=0.5)}})
    await mcp.start()
    try:
        with pytest.raises(ToolError, match=r"timed out after 0\.5 s"):
            await by_name(mcp)["mcp__test__sleep"].run({"seconds": 30}, CTX)
        output = await by_name(mcp)["mcp__test__add"].run({"a": 1, "b": 1}, CTX)
        assert output.content == "2"  # the session survives a timed-out call
    finally:
        await mcp.close()


async def test_calls_can_run_concurrently(started: McpPlugin) -> None:
    add = by_name(started)["mcp__test__add"]
    outputs = await asyncio.gather(*(add.run({"a": n, "b": n}, CTX) for n in range(5)))
    assert [output.content for output in outputs] == ["0", "2", "4", "6", "8"]


async def test_a_missing_command_is_a_clear_start_error() -> None:
    mcp = plugin({"servers": {"ghost": {"command": "/nonexistent/mcp-server"}}})
    with pytest.raises(McpServerError, match="'ghost' failed to start: command not found"):
        await mcp.start()


async def test_a_server_that_exits_reports_its_code_and_stderr() -> None:
    crash = "import sys; print('no config file', file=sys.stderr); sys.exit(3)"
    mcp = plugin({"servers": {"crashy": {"command": sys.executable, "args": ["-c", crash]}}})
    with pytest.raises(McpServerError) as raised:
        await mcp.start()
    message = str(raised.value)
    assert "'crashy' failed to start: it exited with code 3" in message
    assert "no config file" in message


async def test_a_server_that_never_answers_is_a_start_timeout() -> None:
    silent = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}
    mcp = plugin({"servers": {"silent": {**silent, "start_timeout_seconds": 0.5}}})
    with pytest.raises(
        McpServerError, match=r"'silent' failed to start: no MCP handshake within 0\.5 s"
    ):
        await mcp.start()


async def test_one_failing_server_stops_the_others(tmp_path: Path) -> None:
    servers: dict[str, JSONValue] = {
        "good": server_spec(tmp_path),
        "bad": {"command": "/nonexistent/mcp-server"},
    }
    with pytest.raises(McpServerError, match="'bad'"):
        await plugin({"servers": servers}).start()
    assert not is_running(server_pid(tmp_path))


async def test_close_ends_the_server_process(tmp_path: Path) -> None:
    mcp = plugin({"servers": {"test": server_spec(tmp_path)}})
    await mcp.start()
    pid = server_pid(tmp_path)
    assert is_running(pid)
    await mcp.close()
    assert not is_running(pid)
    with pytest.raises(RuntimeError):
        mcp.tools()


def pid_in(path: Path, *, forget: bool = False) -> int | None:
    text = path.read_text() if path.exists() else ""
    if forget:
        path.unlink(missing_ok=True)
    return int(text) if text.isdigit() else None


async def kill_mid_call(mcp: McpPlugin, began: Path) -> ToolError:
    """Call `hang`, SIGKILL the server once it is inside the call; the call's error."""
    pid_in(began, forget=True)
    hang = by_name(mcp)["mcp__test__hang"]
    hanging = asyncio.create_task(hang.run({"started_file": str(began)}, CTX))

    async def call_began() -> bool:
        return pid_in(began) is not None

    await until(call_began, "the server is inside the call")
    os.kill(cast(int, pid_in(began)), signal.SIGKILL)
    with pytest.raises(ToolError) as died:
        await hanging
    return died.value


async def test_a_server_killed_mid_call_is_an_unknown_outcome_and_restarted(
    started: McpPlugin, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first_pid = server_pid(tmp_path)
    died = str(await kill_mid_call(started, tmp_path / "began"))
    assert "mcp server 'test' died during this call (it exited with code -9 (signal 9))" in died
    assert OUTCOME_UNKNOWN in died  # it may have acted before it died
    # The next call starts it again, and works.
    assert (await by_name(started)["mcp__test__add"].run({"a": 1, "b": 2}, CTX)).content == "3"
    assert server_pid(tmp_path) != first_pid and is_running(server_pid(tmp_path))
    assert "mcp server 'test' crashed during tool 'hang'" in caplog.text
    assert "mcp server 'test' restarted after crash 1" in caplog.text


async def test_a_server_that_keeps_crashing_is_not_restarted_for_ever(
    started: McpPlugin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_server, "RESTART_BACKOFF_SECONDS", (0.0,))  # the bound, not the wait
    for _ in range(mcp_server.MAX_RESTARTS + 1):
        assert "died during this call" in str(await kill_mid_call(started, tmp_path / "began"))
    with pytest.raises(ToolError, match=r"is gone: it crashed 6 times, and is not started again"):
        await by_name(started)["mcp__test__add"].run({"a": 1, "b": 2}, CTX)


async def test_a_tool_with_an_invalid_input_schema_is_left_out_with_a_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = server_spec(tmp_path)
    spec["env"] = {**cast(dict[str, JSONValue], spec["env"]), "NOETA_TEST_BROKEN_SCHEMA": "1"}
    mcp = plugin({"servers": {"test": spec}})
    await mcp.start()
    try:
        names = set(by_name(mcp))
        assert "mcp__test__add" in names and "mcp__test__broken" not in names
        assert (
            "mcp server 'test': tool 'broken' left out: its input schema is invalid "
            "(properties/n/type: 'int' is not valid under any of the given schemas)"
        ) in caplog.text
    finally:
        await mcp.close()


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"servers": {}},
        {"servers": {"x": {"command": "run"}}, "extra": 1},
        {"servers": {"bad name": {"command": "run"}}},
        {"servers": {"x": "run"}},
        {"servers": {"x": {}}},
        {"servers": {"x": {"command": "run", "args": "--flag"}}},
        {"servers": {"x": {"command": "run", "env": {"A": 1}}}},
        {"servers": {"x": {"command": "run", "timeout_seconds": 0}}},
        {"servers": {"x": {"command": "run", "colour": "red"}}},
    ],
)
def test_bad_params_are_a_value_error(params: dict[str, JSONValue]) -> None:
    with pytest.raises(ValueError, match="mcp"):
        plugin(params)


def test_tool_names_are_sanitized_and_bounded() -> None:
    assert tool_name("files", "read.file v2") == "mcp__files__read_file_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64
    assert long != tool_name("server", "x" * 99)

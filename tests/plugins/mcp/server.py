"""A tiny real MCP server (stdio) for the MCP plugin's tests: tools, an error, a resource."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

server = MCPServer("noeta-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def record(text: str, ctx: Context[Any]) -> str:
    """Append the request's idempotency key and the text to the ledger file."""
    meta = ctx.request_context.meta or {}
    line = {"idempotency_key": meta.get("idempotency_key"), "text": text}
    with open(os.environ["NOETA_TEST_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(line) + "\n")
    return f"recorded {text}"


@server.tool()
def fail() -> CallToolResult:
    """Always fail, as a tool-level error result."""
    return CallToolResult(content=[TextContent(type="text", text="it broke")], is_error=True)


@server.tool()
def picture() -> CallToolResult:
    """Return a caption and a small image."""
    image = ImageContent(type="image", data="aGVsbG8=", mime_type="image/png")
    return CallToolResult(content=[TextContent(type="text", text="a picture"), image])


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, to test call timeouts."""
    await asyncio.sleep(seconds)
    return "slept"


def _mark(path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(str(os.getpid()))


@server.tool()
async def hang(started_file: str) -> str:
    """Write `started_file`, then never answer (to kill the server mid-call)."""
    _mark(started_file)
    await asyncio.Event().wait()
    return "never"


if os.environ.get("NOETA_TEST_BROKEN_SCHEMA"):

    @server.tool()
    def broken(n: int) -> int:
        """A tool that publishes an input schema no validator accepts."""
        return n

    tool = server._tool_manager.get_tool("broken")
    assert tool is not None
    tool.parameters = {"type": "object", "properties": {"n": {"type": "int"}}}


@server.resource("note://greeting", mime_type="text/plain")
def greeting() -> str:
    """A short text note."""
    return "hello from the test server"


if __name__ == "__main__":
    if pid_file := os.environ.get("NOETA_TEST_PID_FILE"):
        with open(pid_file, "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
    server.run("stdio")

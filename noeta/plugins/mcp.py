"""The MCP plugin: the tools (and resource reads) of MCP servers run over stdio, as noeta tools.

Every `tools/call` carries the call's idempotency key in `_meta`, under `IDEMPOTENCY_META_KEY`.
Each server's process, its restarts and its requests are `mcp_server.McpServer`'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import types

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool, ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.mcp_server import (
    DEFAULT_TIMEOUT_SECONDS,
    McpServer,
    McpServerError,
    ServerConfig,
)
from noeta.plugins.tool_environment import passed_names

IDEMPOTENCY_META_KEY = "idempotency_key"  # `_meta` key holding `<task id>:<call id>`
MAX_TOOL_NAME = 64
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_-]")

log = logging.getLogger("noeta.plugins.mcp")


def plugin(params: dict[str, JSONValue]) -> McpPlugin:
    """`{"servers": {name: {"command": str, ...the other `ServerConfig` fields}}}`."""
    servers = params.get("servers")
    if set(params) != {"servers"} or not isinstance(servers, dict) or not servers:
        raise ValueError('mcp params must be {"servers": {"<name>": {"command": ...}, ...}}')
    return McpPlugin({name: _server_config(name, spec) for name, spec in servers.items()})


def _server_config(name: str, spec: JSONValue) -> ServerConfig:
    where = f"mcp server {name!r}"
    if not name or _UNSAFE_NAME_CHARACTERS.search(name):
        raise ValueError(f"{where}: a server name uses only letters, digits, '_' and '-'")
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected an object with a 'command'")
    if unknown := set(spec) - {*ServerConfig.__dataclass_fields__}:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    command, args, env, cwd = (spec.get(key) for key in ("command", "args", "env", "cwd"))
    if not isinstance(command, str) or not command:
        raise ValueError(f"{where}: 'command' must be a non-empty string")
    args = [] if args is None else args
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValueError(f"{where}: 'args' must be a list of strings")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(value, str) for value in env.values())
    ):
        raise ValueError(f"{where}: 'env' must map names to strings")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError(f"{where}: 'cwd' must be a string")
    timeout, start_timeout = (
        _seconds(where, spec, key) for key in ("timeout_seconds", "start_timeout_seconds")
    )
    pass_env = passed_names(where, spec.get("pass_env"))
    return ServerConfig(command, tuple(cast(list[str], args)), cast(dict[str, str] | None, env),
                        cwd, timeout, start_timeout, pass_env)  # fmt: skip


def _seconds(where: str, spec: dict[str, JSONValue], key: str) -> float:
    value = spec.get(key, DEFAULT_TIMEOUT_SECONDS)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{where}: {key!r} must be a positive number")
    return float(value)


class McpPlugin:
    """Starts each server, offers its tools, and shuts it down again.

    Each server's transport and session live in one long-lived task of their own: anyio's
    cancel scopes must be exited by the task that entered them, and `start()` and `close()`
    may run in different tasks. Calls go straight to the session from the caller's task.
    """

    name = "mcp"

    def __init__(self, servers: Mapping[str, ServerConfig]) -> None:
        self._servers = [McpServer(name, config) for name, config in servers.items()]
        self._tools: list[Tool] | None = None

    async def start(self) -> None:
        try:
            outcomes = await asyncio.gather(
                *(server.start() for server in self._servers), return_exceptions=True
            )
            if errors := [str(outcome) for outcome in outcomes if outcome is not None]:
                raise McpServerError("\n".join(errors))
            tools = [tool for server in self._servers for tool in server_tools(server)]
            if len({tool.name for tool in tools}) < len(tools):
                raise McpServerError("two MCP tools have the same name once sanitized")
            self._tools = tools
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        self._tools = None
        await asyncio.gather(*(server.close() for server in self._servers))

    def tools(self) -> Sequence[Tool]:
        if self._tools is None:
            raise RuntimeError("the mcp plugin's tools exist only between start() and close()")
        return self._tools


def tool_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>` in [A-Za-z0-9_-]; a hash keeps over-long names distinct."""
    name = _UNSAFE_NAME_CHARACTERS.sub("_", f"mcp__{server}__{tool}")
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_TOOL_NAME - 9]}_{digest}"


def server_tools(server: McpServer) -> list[Tool]:
    """Its tools; one whose input schema is not a valid JSON Schema object is left out
    (logged): every call to it would fail, and no input could be checked against it."""
    tools: list[Tool] = []
    for tool in server.listed_tools:
        problem = _schema_problem(tool.input_schema)
        if problem:
            log.warning(
                "mcp server %r: tool %r left out: its input schema is invalid (%s)",
                server.name,
                tool.name,
                problem,
            )
        else:
            tools.append(_CallTool(server, tool))
    return [*tools, _ReadResourceTool(server)] if server.resources else tools


def _schema_problem(schema: object) -> str:
    """Why `schema` cannot be a tool's input schema, or "" if it can."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "a tool's input schema must be an object schema"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.path) or "the schema"
        return f"{where}: {error.message}"
    return ""


class _CallTool:
    """One remote tool; not retry_safe, since a remote tool may have side effects."""

    flags = ToolFlags(retry_safe=False)

    def __init__(self, server: McpServer, tool: types.Tool) -> None:
        self.server, self.remote_name = server, tool.name
        self.name = tool_name(server.name, tool.name)
        self.description = tool.description or tool.title or tool.name
        self.input_schema = cast(dict[str, JSONValue], tool.input_schema)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        meta = cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: ctx.idempotency_key})
        result = await self.server.request(
            f"tool {self.remote_name!r}",
            lambda session: session.call_tool(self.remote_name, input, meta=meta),
        )
        text = "\n".join(_render(block) for block in result.content)
        if not result.content and result.structured_content is not None:
            text = json.dumps(result.structured_content)
        return ToolOutput(text, is_error=bool(result.is_error))


class _ReadResourceTool:
    """Reads one of a server's resources; retry_safe, since reading changes nothing."""

    flags = ToolFlags(retry_safe=True)
    input_schema: dict[str, JSONValue] = {  # noqa: RUF012 (read-only, shared)
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
        "required": ["uri"],
    }

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.name = tool_name(server.name, "read_resource")
        listed = "\n".join(
            f"- {r.uri}: {r.description or r.title or r.name}" for r in server.resources[:50]
        )
        self.description = f"Read a resource of MCP server {server.name!r} by URI.\n{listed}"

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        uri = input.get("uri")
        if not isinstance(uri, str):
            raise ToolError("'uri' must be a string")
        result = await self.server.request(
            f"reading {uri!r}", lambda session: session.read_resource(uri)
        )
        return ToolOutput("\n".join(_render_contents(contents) for contents in result.contents))


def _render(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        return _render_contents(block.resource)
    return f"[resource link: {block.uri}]"


def _render_contents(contents: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(contents, types.TextResourceContents):
        return contents.text
    kind = contents.mime_type or "binary"
    return f"[{contents.uri}: {kind}, {_decoded_size(contents.blob)} bytes]"


def _decoded_size(base64_text: str) -> int:
    return len(base64_text) * 3 // 4 - base64_text[-2:].count("=")

"""The MCP plugin: the tools (and resource reads) of MCP servers run over stdio, as noeta tools.

Every `tools/call` carries the call's idempotency key in `_meta`, under `IDEMPOTENCY_META_KEY`.
A server that dies is started again at the next call, at most `MAX_RESTARTS` times, with
backoff; the call it died in is reported with the words of an unknown outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TextIO, TypeVar, cast

import anyio
from anyio.abc import Process
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.shared.exceptions import MCPError

from noeta.core.errors import NoetaError
from noeta.core.payload import JSONValue
from noeta.core.tool import OUTCOME_UNKNOWN, Tool, ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.tool_environment import passed_names, tool_environment

IDEMPOTENCY_META_KEY = "idempotency_key"  # `_meta` key holding `<task id>:<call id>`
DEFAULT_TIMEOUT_SECONDS = 120.0
MAX_TOOL_NAME = 64
STDERR_TAIL_BYTES = 4096
MAX_RESTARTS = 5  # per server, for the life of the process: a server that keeps dying stays down
RESTART_BACKOFF_SECONDS = (0.0, 1.0, 2.0, 5.0, 10.0)  # after the 1st, 2nd, ... crash
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_-]")
_CONNECTION_CLOSED = types.CONNECTION_CLOSED
_Result = TypeVar("_Result")

log = logging.getLogger("noeta.plugins.mcp")


class McpServerError(NoetaError):
    """A configured MCP server could not be started or listed."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None  # set for the server, over its allowlisted environment
    cwd: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS  # per call
    start_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS  # launch, handshake and listing
    pass_env: tuple[str, ...] = ()  # worker variables this server sees (e.g. a token)


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
        self._servers = [_Server(name, config) for name, config in servers.items()]
        self._tools: list[Tool] | None = None

    async def start(self) -> None:
        try:
            outcomes = await asyncio.gather(
                *(server.start() for server in self._servers), return_exceptions=True
            )
            if errors := [str(outcome) for outcome in outcomes if outcome is not None]:
                raise McpServerError("\n".join(errors))
            tools = [tool for server in self._servers for tool in server.noeta_tools()]
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


@dataclass(eq=False)
class _Server:
    name: str
    config: ServerConfig
    session: ClientSession | None = None
    listed_tools: list[types.Tool] = field(default_factory=list)
    resources: list[types.Resource] = field(default_factory=list)
    _process: Process | None = None  # the SDK's private process handle, if we could see it
    _stderr: TextIO | None = None  # the server's stderr, kept for error messages
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _crashes: int = 0
    _crashed_at: float = 0.0  # time.monotonic() of the last crash
    _dead: bool = False  # it died (or its session ended) since it was last started
    _restarting: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def start(self) -> None:
        self._stderr = stderr = cast(TextIO, tempfile.TemporaryFile("w+"))  # noqa: SIM115
        self._stop = asyncio.Event()
        ready = asyncio.get_running_loop().create_future()
        serve = self._serve(ready, stderr)
        self._task = asyncio.create_task(serve, name=f"mcp server {self.name}")
        await ready

    async def _serve(self, ready: asyncio.Future[None], stderr: TextIO) -> None:
        """Hold the transport and session open until `close()`; report how starting went."""
        params = StdioServerParameters(
            command=self.config.command, args=list(self.config.args),
            env={**tool_environment(None, self.config.pass_env), **(self.config.env or {})},
            cwd=self.config.cwd,
        )  # fmt: skip
        try:
            async with AsyncExitStack() as stack:
                transport = stdio_client(params, errlog=stderr)
                read, write = await stack.enter_async_context(transport)
                self._process = _process_of(transport)
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(self.config.start_timeout_seconds):
                    await self._list(session, await session.initialize())
                self.session = session
                ready.set_result(None)
                await self._stop.wait()
        except Exception as error:
            while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]  # anyio's task groups wrap what went wrong
            if not ready.done():
                ready.set_exception(McpServerError(self._start_failure(error)))
        finally:
            self.session = None

    async def _list(self, session: ClientSession, info: types.InitializeResult) -> None:
        page = types.PaginatedRequestParams
        tools = await session.list_tools()
        self.listed_tools = list(tools.tools)
        while tools.next_cursor is not None:
            tools = await session.list_tools(params=page(cursor=tools.next_cursor))
            self.listed_tools += tools.tools
        if info.capabilities.resources is None:
            return
        resources = await session.list_resources()
        self.resources = list(resources.resources)
        while resources.next_cursor is not None:
            resources = await session.list_resources(params=page(cursor=resources.next_cursor))
            self.resources += resources.resources

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            if self.session is None:
                self._task.cancel()  # still starting: abandon the handshake
            await asyncio.wait([self._task])
        if self._stderr is not None:
            self._stderr.close()

    def noeta_tools(self) -> list[Tool]:
        """Its tools; one whose input schema is not a valid JSON Schema object is left out
        (logged): every call to it would fail, and no input could be checked against it."""
        tools: list[Tool] = []
        for tool in self.listed_tools:
            problem = _schema_problem(tool.input_schema)
            if problem:
                log.warning(
                    "mcp server %r: tool %r left out: its input schema is invalid (%s)",
                    self.name,
                    tool.name,
                    problem,
                )
            else:
                tools.append(_CallTool(self, tool))
        return [*tools, _ReadResourceTool(self)] if self.resources else tools

    def _start_failure(self, error: Exception) -> str:
        why = str(error) or type(error).__name__
        if isinstance(error, FileNotFoundError):
            why = f"command not found: {self.config.command!r}"
        elif isinstance(error, TimeoutError):
            why = f"no MCP handshake within {self.config.start_timeout_seconds:g} s"
        elif isinstance(error, MCPError) and error.code == _CONNECTION_CLOSED:
            why = self._ended()
        return f"mcp server {self.name!r} failed to start: {why}"

    def _ended(self) -> str:
        code = self._process.returncode if self._process else None
        status = "it exited" if code is None else f"it exited with code {code}"
        status += f" (signal {-code})" if code is not None and code < 0 else ""
        return status + (f"; last stderr lines:\n{tail}" if (tail := self._stderr_tail()) else "")

    def _stderr_tail(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        descriptor = self._stderr.fileno()
        size = os.fstat(descriptor).st_size
        data = os.pread(descriptor, STDERR_TAIL_BYTES, max(0, size - STDERR_TAIL_BYTES))
        return "\n".join(data.decode(errors="replace").strip().splitlines()[-10:])

    async def request(
        self, what: str, send: Callable[[ClientSession], Awaitable[_Result]]
    ) -> _Result:
        """Run one request against the session, turning each failure into a `ToolError`."""
        session = await self._running_session()
        try:
            with anyio.fail_after(self.config.timeout_seconds):
                return await send(session)
        except TimeoutError:
            raise ToolError(
                f"{what} on mcp server {self.name!r} timed out after "
                f"{self.config.timeout_seconds:g} s; it may still take effect"
            ) from None
        except MCPError as error:
            if error.code == _CONNECTION_CLOSED:
                if self._process is not None:  # its exit code lands shortly after the EOF
                    with anyio.move_on_after(1):
                        await self._process.wait()
                ended = self._ended()
                self._crashed(f"during {what}: {ended}")
                # The server may have acted before it died: say so as recovery would.
                raise ToolError(
                    f"mcp server {self.name!r} died during this call ({ended}). {OUTCOME_UNKNOWN}"
                ) from None
            raise ToolError(f"{what} on mcp server {self.name!r} failed: {error}") from None

    def _crashed(self, how: str) -> None:
        if self._dead:
            return  # one crash, seen by several calls
        self._dead = True
        self._crashes += 1
        self._crashed_at = time.monotonic()
        log.warning(
            "mcp server %r crashed %s (crash %d; restarted at the next call, at most %d times)",
            self.name,
            how,
            self._crashes,
            MAX_RESTARTS,
        )

    async def _running_session(self) -> ClientSession:
        """The live session, starting the server again first if it died (bounded)."""
        exited = self._process is not None and self._process.returncode is not None
        if self.session is None or exited:
            self._crashed(f"between calls: {self._ended()}")
        async with self._restarting:
            if self._dead:
                await self._restart()
        if self.session is None:
            raise ToolError(f"mcp server {self.name!r} is not running")
        return self.session

    async def _restart(self) -> None:
        if self._crashes > MAX_RESTARTS:
            raise ToolError(
                f"mcp server {self.name!r} is gone: it crashed {self._crashes} times, "
                "and is not started again until the worker restarts"
            )
        backoff = RESTART_BACKOFF_SECONDS[min(self._crashes, len(RESTART_BACKOFF_SECONDS)) - 1]
        await asyncio.sleep(max(0.0, self._crashed_at + backoff - time.monotonic()))
        await self.close()
        try:
            await self.start()
        except McpServerError as error:
            self._crashed_at = time.monotonic()
            self._crashes += 1
            log.warning("mcp server %r: restart failed: %s", self.name, error)
            raise ToolError(str(error)) from None
        self._dead = False
        log.warning("mcp server %r restarted after crash %d", self.name, self._crashes)


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


def _process_of(transport: object) -> Process | None:
    """The SDK keeps its server process private; peek at it only to report its exit code."""
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = cast(dict[str, object], getattr(frame, "f_locals", {})).get("process")
    return process if isinstance(process, Process) else None


class _CallTool:
    """One remote tool; not retry_safe, since a remote tool may have side effects."""

    flags = ToolFlags(retry_safe=False)

    def __init__(self, server: _Server, tool: types.Tool) -> None:
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

    def __init__(self, server: _Server) -> None:
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

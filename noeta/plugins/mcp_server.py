"""One MCP server over stdio: its process and session, held by a task of their own.

A server that dies is started again at the next call, at most `MAX_RESTARTS` times, with
backoff; the call it died in is reported with the words of an unknown outcome.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TextIO, TypeVar, cast

import anyio
from anyio.abc import Process
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.shared.exceptions import MCPError

from noeta.core.errors import NoetaError
from noeta.core.ports.tool import OUTCOME_UNKNOWN, ToolError
from noeta.plugins.tool_environment import tool_environment

DEFAULT_TIMEOUT_SECONDS = 120.0
STDERR_TAIL_BYTES = 4096
MAX_RESTARTS = 5  # per server, for the life of the process: a server that keeps dying stays down
RESTART_BACKOFF_SECONDS = (0.0, 1.0, 2.0, 5.0, 10.0)  # after the 1st, 2nd, ... crash
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


@dataclass(eq=False)
class McpServer:
    """One configured server's process and session: started, asked, restarted, closed."""

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


def _process_of(transport: object) -> Process | None:
    """The SDK keeps its server process private; peek at it only to report its exit code."""
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = cast(dict[str, object], getattr(frame, "f_locals", {})).get("process")
    return process if isinstance(process, Process) else None

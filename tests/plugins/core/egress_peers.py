"""The far ends the egress proxy's tests talk to, all on 127.0.0.1: a local origin, the
injected resolver and connect, real clients (curl, git, pip) and the proxy being served.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from noeta.plugins.core.egress_proxy import EgressProxy, Streams, open_tcp

PUBLIC = "93.184.215.14"
NAMES = {
    "public.test": [PUBLIC],
    "internal.test": ["10.1.2.3"],
    "mixed.test": [PUBLIC, "127.0.0.1"],
}


class Origin:
    """A local HTTP server that records each request head; after `ECHO\\r\\n\\r\\n` it
    echoes bytes back instead (a tunnel's far end)."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Origin:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if head == b"ECHO\r\n\r\n":
                while chunk := await reader.read(1024):
                    writer.write(chunk)
                    await writer.drain()
                self.closed.set()
                return
            body = b"hello from the origin"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            self.closed.set()
        finally:
            writer.close()


class Seams:
    """The injected resolver (NAMES) and connect: a call is recorded and, when `origin`
    is set, answered with a stream to that local port, whatever address was asked."""

    def __init__(self, origin: int | None = None) -> None:
        self.origin = origin
        self.connects: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        return NAMES[host]

    async def connect(self, address: str, port: int) -> Streams:
        self.connects.append((address, port))
        if self.origin is None:
            raise AssertionError(f"the proxy connected to {address}:{port}")
        return await open_tcp("127.0.0.1", self.origin)


@asynccontextmanager
async def serving(proxy: EgressProxy) -> AsyncIterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = int(listener.getsockname()[1])
    task = asyncio.create_task(proxy.serve(listener))
    try:
        yield port
    finally:
        task.cancel()
        await asyncio.wait({task})  # unlike `await task`, cannot swallow our own cancel
        assert task.cancelled()
        assert listener.fileno() == -1


async def exchange(port: int, request: bytes) -> bytes:
    """Send `request` to the proxy and read everything until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    answer = await reader.read()
    writer.close()
    return answer


async def tunnel(port: int, target: str) -> Streams:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
    return reader, writer


async def echoed(streams: Streams, data: bytes) -> bytes:
    reader, writer = streams
    writer.write(b"ECHO\r\n\r\n" + data)
    return await reader.readexactly(len(data))


async def curl(proxy_port: int, *arguments: str) -> tuple[int, str, str]:
    executable = shutil.which("curl")
    if executable is None:
        pytest.skip("curl is not installed")
    environment = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    process = await asyncio.create_subprocess_exec(
        executable,
        "-sS",
        "--max-time",
        "60",
        "-x",
        f"http://127.0.0.1:{proxy_port}",
        *arguments,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def in_thread(call: Callable[[], bytes]) -> Awaitable[bytes]:
    return asyncio.to_thread(call)


class LoopbackOnly:
    """The seams for a real client: no name resolves, only 127.0.0.1 is connected to,
    and every connection is recorded (so it is known the client used the proxy)."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} is not resolved in tests")

    async def connect(self, address: str, port: int) -> Streams:
        self.connects.append((address, port))
        assert address == "127.0.0.1", f"the proxy connected to {address}"
        return await open_tcp(address, port)


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def static_files(root: Path) -> Iterator[int]:
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def client_environment(proxy_port: int, home: Path) -> dict[str, str]:
    """What the sandbox gives a command (the module docstring's list), and nothing of
    this machine's own proxies or git and pip configuration."""
    environment = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    proxy = f"http://127.0.0.1:{proxy_port}"
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        environment[name] = environment[name.upper()] = proxy
    environment.update(
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
    )
    return environment


async def run(environment: dict[str, str], *command: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *command,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, out.decode()
    return out.decode()

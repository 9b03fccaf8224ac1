"""The egress proxy lets a sandboxed command reach what WebFetch may reach and nothing
else, with real clients on real sockets.

Nothing here leaves 127.0.0.1: a "public" or "private" host is a name the injected
resolver maps to such an address, and the injected connect either hands back a stream
to a local server or fails the test when called.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from psycopg.conninfo import conninfo_to_dict

from noeta.plugins.core.egress_proxy import EgressProxy, Streams, open_tcp
from noeta.plugins.core.web_access import FetchPolicy

if TYPE_CHECKING:
    from noeta.testing.postgres import TestPostgres

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


async def test_curl_and_python_reach_a_server_fetch_allow_opened() -> None:
    async with Origin() as origin:
        policy = FetchPolicy.parse([f"127.0.0.1:{origin.port}"])
        async with serving(EgressProxy(policy)) as port:
            url = f"http://127.0.0.1:{origin.port}/page?q=1"
            assert await curl(port, url) == (0, "hello from the origin", "")
            assert await curl(port, "--proxytunnel", url) == (0, "hello from the origin", "")
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"})
            )
            body = await in_thread(lambda: opener.open(url, timeout=60).read())
            assert body == b"hello from the origin"
            assert await echoed(await tunnel(port, f"127.0.0.1:{origin.port}"), b"ping") == b"ping"
    forwarded = origin.heads[0].decode()
    assert forwarded.startswith("GET /page?q=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{origin.port}\r\n" in forwarded
    assert "Connection: close\r\n" in forwarded
    assert "Proxy-" not in forwarded


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


@pytest.fixture
def served_repository(tmp_path: Path) -> Path:
    """A folder holding `repo.git`, a bare repository git can clone over dumb HTTP."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    source = tmp_path / "source"
    source.mkdir()
    (source / "README").write_text("cloned through the proxy\n")
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for arguments in (["init", "-q"], ["add", "README"], [*identity, "commit", "-qm", "one"]):
        subprocess.run([git, "-C", str(source), *arguments], check=True)
    served = tmp_path / "served"
    bare = str(served / "repo.git")
    subprocess.run([git, "clone", "-q", "--bare", str(source), bare], check=True)
    subprocess.run([git, "-C", bare, "update-server-info"], check=True)
    return served


async def test_git_clone_goes_through_the_proxy_with_the_variables_given(
    tmp_path: Path, served_repository: Path
) -> None:
    served = served_repository
    seams = LoopbackOnly()
    with static_files(served) as files_port:
        policy = FetchPolicy.parse([f"127.0.0.1:{files_port}"])
        proxy = EgressProxy(policy, resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            environment = client_environment(port, tmp_path)
            url = f"http://127.0.0.1:{files_port}/repo.git"
            await run(environment, "git", "clone", "-q", url, str(tmp_path / "clone"))
    assert (tmp_path / "clone" / "README").read_text() == "cloned through the proxy\n"
    assert set(seams.connects) == {("127.0.0.1", files_port)}


async def test_pip_download_goes_through_the_proxy_with_the_variables_given(
    tmp_path: Path,
) -> None:
    project = tmp_path / "index" / "simple" / "noeta-egress-demo"
    project.mkdir(parents=True)
    with zipfile.ZipFile(project / "noeta_egress_demo-1.0-py3-none-any.whl", "w") as wheel:
        info = "noeta_egress_demo-1.0.dist-info"
        wheel.writestr(
            f"{info}/METADATA",
            "Metadata-Version: 2.1\nName: noeta-egress-demo\nVersion: 1.0\n",
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    seams = LoopbackOnly()
    with static_files(tmp_path / "index") as files_port:
        policy = FetchPolicy.parse([f"127.0.0.1:{files_port}"])
        proxy = EgressProxy(policy, resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            await run(
                client_environment(port, tmp_path),
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-cache-dir",
                "--index-url",
                f"http://127.0.0.1:{files_port}/simple",
                "--trusted-host",
                f"127.0.0.1:{files_port}",
                "-d",
                str(tmp_path / "downloaded"),
                "noeta-egress-demo",
            )
    assert (tmp_path / "downloaded" / "noeta_egress_demo-1.0-py3-none-any.whl").is_file()
    assert seams.connects and set(seams.connects) == {("127.0.0.1", files_port)}


async def test_the_database_port_is_refused_with_the_reason(
    postgres_server: TestPostgres,
) -> None:
    database_port = int(conninfo_to_dict(postgres_server.admin_dsn)["port"] or 5432)
    connects: list[tuple[str, int]] = []

    async def recording_connect(address: str, port: int) -> Streams:
        connects.append((address, port))
        return await open_tcp(address, port)

    policy = FetchPolicy.parse(["127.0.0.1:1"])  # open, but not the database's port
    async with serving(EgressProxy(policy, connect=recording_connect)) as port:
        code, out, _ = await curl(port, "-w", "%{http_code}", f"http://127.0.0.1:{database_port}/")
        code_tunnel, _, err = await curl(port, "-p", f"http://127.0.0.1:{database_port}/")
    assert code == 0
    assert out == (
        f"noeta: 127.0.0.1:{database_port} refused: 127.0.0.1 is a loopback address; "
        "commands may reach public addresses only "
        "(the operator can open others with fetch_allow)\n403"
    )
    assert code_tunnel != 0
    assert "403" in err
    assert connects == []


async def test_a_loopback_listener_fetch_allow_did_not_open_gets_no_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as target:
        target.bind(("127.0.0.1", 0))
        target.listen()
        target_port = target.getsockname()[1]
        async with serving(EgressProxy(FetchPolicy())) as port:
            _, out, _ = await curl(port, f"http://127.0.0.1:{target_port}/secret/token?key=k")
            _, _, err = await curl(port, "-p", f"http://127.0.0.1:{target_port}/")
        assert "loopback address" in out
        assert "response 403" in err
        target.setblocking(False)
        with pytest.raises(BlockingIOError):
            target.accept()
    warnings = [r.getMessage() for r in caplog.records if r.name == "noeta.egress"]
    assert warnings == 2 * [
        f"egress proxy refused 127.0.0.1:{target_port}: 127.0.0.1 is a loopback address"
    ]


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET http://internal.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT internal.test:443 HTTP/1.1\r\n\r\n",
        b"CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n",
        b"GET http://10.1.2.3:8080/ HTTP/1.1\r\n\r\n",
        b"CONNECT mixed.test:443 HTTP/1.1\r\n\r\n",
        b"CONNECT [::1]:5432 HTTP/1.1\r\n\r\n",
        b"CONNECT [::ffff:127.0.0.1]:5432 HTTP/1.0\r\n\r\n",
        b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
    ],
)
async def test_a_non_public_address_is_refused_before_any_connect(request_head: bytes) -> None:
    seams = Seams()
    proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
    async with serving(proxy) as port:
        answer = await exchange(port, request_head)
    status, _, body = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 403 Forbidden by noeta: ")
    assert body.endswith(
        b"commands may reach public addresses only "
        b"(the operator can open others with fetch_allow)\n"
    )
    assert seams.connects == []


async def test_the_decision_follows_the_webfetch_rule() -> None:
    seams = Seams()
    proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
    public = await proxy.admit("public.test", 443)
    assert (public.addresses, public.refusal) == ((PUBLIC,), None)
    internal = await proxy.admit("internal.test", 443)
    assert internal.refusal == "internal.test (10.1.2.3) is a private address"
    mixed = await proxy.admit("mixed.test", 443)
    assert mixed.refusal == "mixed.test (127.0.0.1) is a loopback address"
    assert (await proxy.admit("10.1.2.3", 443)).refusal == "10.1.2.3 is a private address"


async def test_a_public_address_is_connected_to_as_checked_and_bytes_flow() -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            assert await echoed(await tunnel(port, "public.test:443"), b"tls bytes") == b"tls bytes"
            answer = await exchange(
                port,
                b"POST http://public.test/submit HTTP/1.1\r\nHost: evil.test\r\n"
                b"Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive, X-Hop\r\n"
                b"X-Hop: 1\r\nContent-Length: 0\r\n\r\n",
            )
    assert seams.connects == [(PUBLIC, 443), (PUBLIC, 80)]
    assert answer.endswith(b"hello from the origin")
    assert origin.heads[1] == (
        b"POST /submit HTTP/1.1\r\nHost: public.test\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "request_head",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: public.test\r\n\r\n",
        b"GET https://public.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT public.test HTTP/1.1\r\n\r\n",
        b"CONNECT public.test:0 HTTP/1.1\r\n\r\n",
        b"CONNECT public.test:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT pub\x01lic.test:443 HTTP/1.1\r\n\r\n",
        b"GET http://public.test/ HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET http://public.test/ SPDY/3\r\n\r\n",
    ],
)
async def test_a_malformed_request_answers_400_and_the_proxy_keeps_serving(
    request_head: bytes,
) -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            assert (await exchange(port, request_head)).startswith(b"HTTP/1.1 400 Bad Request\r\n")
            assert seams.connects == []
            assert await echoed(await tunnel(port, "public.test:443"), b"still") == b"still"


async def test_an_over_long_request_head_answers_431_and_closes() -> None:
    seams = Seams()
    proxy = EgressProxy(
        FetchPolicy(), max_header_bytes=1024, resolve=seams.resolve, connect=seams.connect
    )
    async with serving(proxy) as port:
        answer = await exchange(
            port, b"GET http://public.test/ HTTP/1.1\r\nX-Long: " + b"a" * 4096 + b"\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert seams.connects == []


async def test_a_connection_over_the_limit_answers_503() -> None:
    proxy = EgressProxy(FetchPolicy(), max_connections=2)
    async with serving(proxy) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        answer = await exchange(port, b"")
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert answer.endswith(b"already has 2 connections open through the proxy\n")
        for _, writer in held:
            writer.close()


async def test_a_silent_client_is_closed_at_the_header_timeout() -> None:
    proxy = EgressProxy(FetchPolicy(), header_timeout=0.2)
    async with serving(proxy) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answer = await reader.read()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")


async def test_an_idle_tunnel_is_closed() -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(
            FetchPolicy(), idle_timeout=0.2, resolve=seams.resolve, connect=seams.connect
        )
        async with serving(proxy) as port:
            reader, writer = await tunnel(port, "public.test:443")
            assert await echoed((reader, writer), b"once") == b"once"
            assert await reader.read() == b""
            await origin.closed.wait()
            writer.close()


async def test_cancelling_serve_closes_open_tunnels() -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            reader, writer = await tunnel(port, "public.test:443")
            assert await echoed((reader, writer), b"open") == b"open"
        assert await reader.read() == b""
        await origin.closed.wait()
        writer.close()

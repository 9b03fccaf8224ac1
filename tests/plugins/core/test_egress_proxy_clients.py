"""Real clients (curl, Python's urllib, git, pip) get through the egress proxy to what
fetch_allow opened, with the proxy variables the module docstring lists, and are refused
the database's port and a loopback listener nobody opened.

Nothing here leaves 127.0.0.1: no name resolves and only 127.0.0.1 is connected to.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from psycopg.conninfo import conninfo_to_dict

from noeta.plugins.core.egress_proxy import EgressProxy, Streams, open_tcp
from noeta.plugins.core.web_access import FetchPolicy
from tests.plugins.core.egress_peers import (
    LoopbackOnly,
    Origin,
    client_environment,
    curl,
    echoed,
    in_thread,
    run,
    serving,
    static_files,
    tunnel,
)

if TYPE_CHECKING:
    from noeta.testing.postgres import TestPostgres


async def test_curl_and_python_reach_a_server_fetch_allow_opened() -> None:
    async with Origin() as origin:
        seams = LoopbackOnly()
        policy = FetchPolicy.parse([f"127.0.0.1:{origin.port}"])
        proxy = EgressProxy(policy, resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            url = f"http://127.0.0.1:{origin.port}/page?q=1"
            assert await curl(port, url) == (0, "hello from the origin", "")
            assert await curl(port, "--proxytunnel", url) == (0, "hello from the origin", "")
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"})
            )
            body = await in_thread(lambda: opener.open(url, timeout=60).read())
            assert body == b"hello from the origin"
            assert await echoed(await tunnel(port, f"127.0.0.1:{origin.port}"), b"ping") == b"ping"
    assert seams.connects == 4 * [("127.0.0.1", origin.port)]
    forwarded = origin.heads[0].decode()
    assert forwarded.startswith("GET /page?q=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{origin.port}\r\n" in forwarded
    assert "Connection: close\r\n" in forwarded
    assert "Proxy-" not in forwarded


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

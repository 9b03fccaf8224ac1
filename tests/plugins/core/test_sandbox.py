"""Commands in namespaces of their own (sandbox.py, ADR-0077), through real Bash calls on
the real kernel: no process outlives its call, its job or its worker; no address is
reached but through the proxy; no path exists but the allowed ones; the limits hold."""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from noeta.core.ports.tool import ToolContext, ToolOutput
from noeta.plugins.core import Bash
from noeta.plugins.core.bash import run_job
from noeta.plugins.core.confinement import Confinement
from noeta.plugins.core.sandbox import Bubblewrap, Limits, bubblewrap
from noeta.testing import postgres

WRAP = bubblewrap()
pytestmark = pytest.mark.skipif(
    not isinstance(WRAP, Bubblewrap), reason=f"needs namespaces: {getattr(WRAP, 'reason', '')}"
)
CHECKOUT = Path(__file__).resolve().parents[3]
THIS_PROCESS = Path("/proc/self/cmdline").read_bytes()


def marker() -> str:
    """A `sleep` argument no other process on the machine has."""
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def running(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if mark.encode() in cmdline.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def gone(mark: str, within: float = 10.0) -> bool:
    """Whether every process carrying `mark` has ended: the kernel ends a PID namespace's
    processes as its first one exits, an instant after the call returns."""
    deadline = time.monotonic() + within
    while running(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def ctx_of(workspace: Path) -> ToolContext:
    return ToolContext("task-1", "call-1", workspace=str(workspace))


async def bash(workspace: Path, command: str, confinement: Confinement | None = None) -> str:
    output: ToolOutput = await Bash(confinement=confinement or Confinement()).run(
        {"command": command}, ctx_of(workspace)
    )
    return output.content


def daemons(mark: str) -> str:
    """setsid, a subshell's orphan, nohup and a double-forked daemon, all sleeping on
    `mark`; the command waits until all four run, then says so."""
    fork_twice = (
        "import os; os.fork() == 0 and (os.setsid(), os.fork() == 0 and "
        f"os.execvp('sleep', ['sleep', '{mark}']))"
    )
    return (
        f"setsid sleep {mark} & (sleep {mark} &); nohup sleep {mark} >/dev/null 2>&1 & "
        f'python3 -c "{fork_twice}"; '
        f"for i in $(seq 200); do [ $(pgrep -c -f '^sleep {mark}') -ge 4 ] && break; "
        f"sleep 0.05; done; echo running $(pgrep -c -f '^sleep {mark}')"
    )


async def test_nothing_a_command_started_outlives_its_call(workspace: Path) -> None:
    mark = marker()
    output = await bash(workspace, daemons(mark))
    assert output.startswith("running 4\n"), output
    assert gone(mark)


async def test_nothing_outlives_a_call_that_timed_out(workspace: Path) -> None:
    mark = marker()
    tool = Bash(confinement=Confinement())
    command = f"setsid sleep {mark} & sleep {mark}"
    output = await tool.run({"command": command, "timeout_seconds": 1}, ctx_of(workspace))
    assert "timed out" in output.content
    assert gone(mark)


async def test_nothing_a_background_job_started_outlives_the_job(workspace: Path) -> None:
    mark = marker()
    tool = Bash(confinement=Confinement())
    started = await tool.run(
        {"command": daemons(mark), "run_in_background": True}, ctx_of(workspace)
    )
    assert started.background is not None
    finished = await run_job(started.background, 8_000)
    assert finished.text.startswith("running 4\n"), finished.text
    assert gone(mark)


def test_nothing_a_command_started_outlives_its_worker(workspace: Path) -> None:
    """The process that ran the call (a worker) is SIGKILLed mid-call: every process
    the command started dies with it, daemons included."""
    mark = marker()
    ready = workspace / "ready"
    os.mkfifo(ready)
    program = (
        "import asyncio\n"
        "from noeta.core.ports.tool import ToolContext\n"
        "from noeta.plugins.core import Bash\n"
        f"command = {daemons(mark)!r} + ' > out.txt; echo ready > ready; sleep {mark}'\n"
        f"ctx = ToolContext('task-1', 'call-1', workspace={str(workspace)!r})\n"
        "asyncio.run(Bash().run({'command': command}, ctx))\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", program], cwd=CHECKOUT)
    try:
        assert ready.read_text() == "ready\n"  # blocks until the command opens the FIFO
        assert (workspace / "out.txt").read_text() == "running 4\n"
        assert len(running(mark)) >= 5
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    assert gone(mark)


async def test_proc_shows_only_the_commands_own_processes(workspace: Path) -> None:
    output = await bash(
        workspace, "ls /proc | grep -c '^[0-9]*$'; cat /proc/*/cmdline | tr '\\0' ' '"
    )
    count, cmdlines = output.split("\n", 1)
    assert int(count) <= 5, output  # bwrap's init, the shell, ls, grep
    this_process = THIS_PROCESS.replace(b"\0", b" ").decode()
    assert this_process not in cmdlines


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback service only the worker may reach (the web view, say)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        yield server


def accepted_nothing(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def port_of(server: socket.socket) -> int:
    return int(server.getsockname()[1])


async def test_by_default_loopback_and_the_database_are_out_of_reach(
    workspace: Path, listener: socket.socket, postgres_server: postgres.TestPostgres
) -> None:
    database = int(conninfo_to_dict(postgres_server.admin_dsn)["port"])
    via_proxy = "curl -sS -m 10 -o /dev/null -w '%{http_code}\\n' -x $http_proxy --noproxy ''"
    command = (
        f"{via_proxy} http://127.0.0.1:{port_of(listener)}/; "
        f"{via_proxy} http://127.0.0.1:{database}/; "
        f"curl -sS -m 10 http://127.0.0.1:{port_of(listener)}/ >/dev/null 2>&1; echo $?; "
        f"(echo > /dev/tcp/127.0.0.1/{port_of(listener)}) >/dev/null 2>&1; echo $?"
    )
    output = await bash(workspace, command)
    # Through the proxy: refused by its rule. Direct: loopback is the namespace's own,
    # where nothing listens (curl's 7: could not connect).
    assert output.splitlines()[:4] == ["403", "403", "7", "1"], output
    assert accepted_nothing(listener)


async def test_130_connections_to_the_database_port_reach_nothing(
    workspace: Path, postgres_server: postgres.TestPostgres
) -> None:
    """One command once took the store offline for every worker by parking 130
    connections in PostgreSQL's authentication."""
    database = int(conninfo_to_dict(postgres_server.admin_dsn)["port"])
    program = (
        "import socket\n"
        "opened = []\n"
        "for _ in range(130):\n"
        f"    try: opened.append(socket.create_connection(('127.0.0.1', {database}), timeout=5))\n"
        "    except OSError: pass\n"
        "print('connected', len(opened))\n"
    )
    (workspace / "flood.py").write_text(program)
    assert (await bash(workspace, "python3 flood.py")).startswith("connected 0\n")


async def test_with_network_none_nothing_is_reachable(
    workspace: Path, listener: socket.socket
) -> None:
    command = f"curl -sS -m 5 http://127.0.0.1:{port_of(listener)}/ 2>&1; env | grep -ci proxy"
    output = await bash(workspace, command, Confinement(network="none"))
    assert "Couldn't connect" in output and output.splitlines()[1] == "0", output
    assert accepted_nothing(listener)


async def test_with_network_host_commands_share_the_workers_network(
    workspace: Path, listener: socket.socket
) -> None:
    command = f"echo hello > /dev/tcp/127.0.0.1/{port_of(listener)} && echo sent"
    assert (await bash(workspace, command, Confinement(network="host"))).startswith("sent\n")
    assert not accepted_nothing(listener)


@pytest.fixture
def web_server() -> Iterator[int]:
    """A local HTTP server standing for a public one that the operator opened."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"through the proxy\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


async def test_an_address_the_operator_opened_is_reached_through_the_proxy(
    workspace: Path, web_server: int
) -> None:
    # A public server's stand-in is on loopback, which the command's environment sends
    # direct (to its own namespace): so the test names the proxy, as a public host would.
    curl = f"curl -sS -m 10 -w '%{{http_code}}' -x $http_proxy --noproxy '' http://127.0.0.1:{web_server}/"
    opened = Confinement(fetch_allow=(f"127.0.0.1:{web_server}",))
    output = await bash(workspace, curl, opened)
    assert output.startswith("through the proxy\n200"), output
    closed = await bash(workspace, curl)
    assert "403" in closed and "through the proxy" not in closed


async def test_a_unix_socket_outside_the_allowed_paths_is_unreachable(
    workspace: Path, tmp_path: Path
) -> None:
    """Landlock does not mediate connect(); the mount view has no such path at all."""
    path = tmp_path / "elsewhere" / "service.sock"
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX) as service:
        service.bind(str(path))
        service.listen()
        service.setblocking(False)
        program = (
            f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r}); print('in')"
        )
        output = await bash(workspace, f'python3 -c "{program}"')
        assert "No such file or directory" in output and "\nin\n" not in output, output
        assert accepted_nothing(service)


async def test_a_file_over_the_size_limit_is_cut(workspace: Path) -> None:
    limited = Confinement(limits=Limits(file_size_mb=1))
    output = await bash(workspace, "head -c 3000000 /dev/zero > big; stat -c %s big", limited)
    assert "File size limit exceeded" in output, output  # SIGXFSZ as the shell knows it
    assert (workspace / "big").stat().st_size <= 1024 * 1024


def test_a_fork_bomb_and_a_memory_hog_stop_at_the_limits() -> None:
    """As an unprivileged worker (root is exempt from the process limit): a command
    cannot start more processes, or take more memory, than the operator allows."""
    if os.getuid() == 0 and not os.path.exists("/usr/bin/python3"):
        pytest.skip("as root, needs /usr/bin/python3 to run a worker as nobody")
    workspace = Path(tempfile.mkdtemp(prefix="noeta-limits-"))  # nobody reaches it
    os.chmod(workspace, 0o755)
    forks = (
        "import os, signal, time\n"
        "started = []\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    started.append(pid)\n"
        "print(len(started))\n"
        "for pid in started:\n"
        "    os.kill(pid, signal.SIGKILL)\n"
        "    os.waitpid(pid, 0)\n"
    )
    (workspace / "forks.py").write_text(forks)
    program = (
        "import asyncio\n"
        "from noeta.core.ports.tool import ToolContext\n"
        "from noeta.plugins.core import Bash\n"
        "from noeta.plugins.core.confinement import Confinement\n"
        "from noeta.plugins.core.sandbox import Limits\n"
        "bomb = 'python3 forks.py; python3 -c \"bytearray(512 * 1024 * 1024)\" 2>&1 | tail -1'\n"
        "limits = Limits(processes=64, memory_mb=256)\n"
        f"ctx = ToolContext('task-1', 'call-1', workspace={str(workspace)!r})\n"
        "tool = Bash(confinement=Confinement(limits=limits))\n"
        "print(asyncio.run(tool.run({'command': bomb}, ctx)).content)\n"
    )
    command = [sys.executable, "-c", program]
    if os.getuid() == 0:
        os.chown(workspace, 65534, 65534)
        unprivileged = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        command = [*unprivileged, "/usr/bin/python3", "-c", program]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(CHECKOUT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    shutil.rmtree(workspace)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert 0 < int(lines[0]) < 64, done.stdout  # the rest were refused
    assert lines[1:3] == ["MemoryError", "[exit code 0]"], done.stdout


async def test_every_call_still_works_when_many_run_at_once(workspace: Path) -> None:
    outputs = await asyncio.gather(*(bash(workspace, f"echo {n}") for n in range(20)))
    assert [o.splitlines()[0] for o in outputs] == [str(n) for n in range(20)]

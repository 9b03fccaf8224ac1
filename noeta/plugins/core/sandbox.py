"""Commands in namespaces of their own, made by bubblewrap: a mount view in which only
the allowed paths exist, a PID namespace whose every process dies with the command, a
network namespace whose only way out is noeta's egress proxy, and resource limits; the
worker's Landlock ruleset is entered inside as a second layer (ADR-0077).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from noeta.core.ports.tool import ToolError
from noeta.plugins.core import sandbox_init
from noeta.plugins.core.landlock import Availability

NETWORK_MODES = ("proxy", "none", "host")
PROXY_URL = f"http://127.0.0.1:{sandbox_init.PROXY_PORT}"
# What curl, pip, git (libcurl), Python's urllib and requests read; both spellings, as
# tools differ on which they honour (curl and git read only the lower-case http_proxy).
PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
)
# Loopback inside the namespace is the command's own (a server it started): direct.
NO_PROXY = "localhost,127.0.0.1,::1"
# What a command sees of the system: read-only, as it is on the host.
SYSTEM_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc")
TMP_BYTES = 256 * 1024 * 1024  # /tmp is private and in memory; TMPDIR is in the workspace
_INIT_PATH = "/run/noeta/init.py"
_PROBE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-process resource limits a command starts with (setrlimit; the operator's
    `limits:`). Processes count per user inside the sandbox's own user namespace."""

    processes: int = 1024
    memory_mb: int = 8192  # address space of each process
    open_files: int = 4096
    file_size_mb: int = 8192  # the largest file a command may write
    cpu_seconds: int = 3600  # CPU time of each process: a background job runs up to 3600 s

    def rlimits(self) -> str:
        mib = 1024 * 1024
        return ",".join(
            f"{name}={value}"
            for name, value in (
                ("RLIMIT_NPROC", self.processes),
                ("RLIMIT_AS", self.memory_mb * mib),
                ("RLIMIT_NOFILE", self.open_files),
                ("RLIMIT_FSIZE", self.file_size_mb * mib),
                ("RLIMIT_CPU", self.cpu_seconds),
            )
        )


def parse_limits(value: object) -> Limits:
    """The core plugin's `limits:` mapping; a mistake is a ValueError naming it."""
    if value is None:
        return Limits()
    known = Limits.__dataclass_fields__
    if not isinstance(value, dict):
        raise ValueError(f"core plugin: limits must be a mapping of {', '.join(known)}")
    settings: dict[str, int] = {}
    for key, number in value.items():
        if key not in known:
            raise ValueError(
                f"core plugin: limits: unknown limit {key!r}; it accepts {', '.join(known)}"
            )
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"core plugin: limits: {key} must be a whole number above 0")
        settings[key] = number
    return Limits(**settings)


@dataclass(frozen=True, slots=True)
class Bubblewrap:
    """The bwrap found on this machine and the options it knows."""

    path: str
    disables_userns: bool  # --disable-userns (0.8): no namespace of its own inside
    sizes_tmpfs: bool  # --size (0.8)


@functools.cache
def bubblewrap() -> Bubblewrap | Availability:
    """bwrap, if it is installed and can make the namespaces here; else why not."""
    path = shutil.which("bwrap")
    if path is None:
        return Availability(0, "bubblewrap (bwrap) is not installed; `make install` brings it")
    try:
        helped = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=_PROBE_SECONDS, check=False
        )
        probe = subprocess.run(
            [path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
            capture_output=True,
            text=True,
            timeout=_PROBE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Availability(0, f"bubblewrap could not be run ({error})")
    if probe.returncode != 0:
        said = probe.stderr.strip().splitlines()
        why = said[-1] if said else f"exit code {probe.returncode}"
        return Availability(0, f"bubblewrap cannot make namespaces here ({why})")
    return Bubblewrap(path, "--disable-userns" in helped.stdout, "--size" in helped.stdout)


@dataclass(frozen=True, slots=True)
class View:
    """What one command's sandbox holds besides the system: its workspace, other paths
    read-only or read-write, and its network."""

    workspace: str
    readable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    network: str = "proxy"


@dataclass(slots=True)
class Plan:
    """How to start one command: its argv, the descriptors it inherits, and the worker's
    end of the channel the proxy's socket comes back on (None: no proxy)."""

    argv: list[str]
    pass_fds: tuple[int, ...]
    channel: socket.socket | None


@contextlib.contextmanager
def planned(
    wrap: Bubblewrap,
    command: Sequence[str],
    view: View,
    limits: Limits,
    ruleset_fd: int | None,
) -> Iterator[Plan]:
    """The plan for `command` in `view`; the child's ends are closed when the block ends,
    after the command has started."""
    channel: socket.socket | None = None
    child_end: socket.socket | None = None
    if view.network == "proxy":
        channel, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    inherited = tuple(
        fd for fd in (child_end.fileno() if child_end else None, ruleset_fd) if fd is not None
    )
    init = [
        _interpreter()[0],
        "-I",
        "-S",
        _INIT_PATH,
        limits.rlimits(),
        str(child_end.fileno()) if child_end else "-",
        str(ruleset_fd) if ruleset_fd is not None else "-",
        "--",
        _program(command[0]),
        *command[1:],
    ]
    try:
        yield Plan([*_bwrap_arguments(wrap, view), "--", *init], inherited, channel)
    except BaseException:
        if channel is not None:
            channel.close()
        raise
    finally:
        if child_end is not None:
            child_end.close()


def _bwrap_arguments(wrap: Bubblewrap, view: View) -> list[str]:
    arguments = [wrap.path, "--unshare-user", "--unshare-pid", "--unshare-ipc"]
    arguments += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if wrap.disables_userns:
        arguments.append("--disable-userns")
    if view.network != "host":
        arguments.append("--unshare-net")  # only loopback inside, and nobody listening
    for path in SYSTEM_VIEW:
        if os.path.islink(path):
            arguments += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            arguments += ["--ro-bind", path, path]
    arguments += ["--proc", "/proc", "--dev", "/dev"]
    if wrap.sizes_tmpfs:
        arguments += ["--size", str(TMP_BYTES)]
    arguments += ["--tmpfs", "/tmp"]
    runtime = _interpreter()[1]
    if runtime is not None:
        arguments += ["--ro-bind", runtime, runtime]  # the init's interpreter
    arguments += ["--ro-bind", os.path.realpath(sandbox_init.__file__), _INIT_PATH]
    for path in view.readable:
        arguments += ["--ro-bind", path, path]
    for path in (view.workspace, *view.writable):
        arguments += ["--bind", path, path]
    arguments += ["--chdir", view.workspace]
    return arguments


def _program(name: str) -> str:
    """`name` as an absolute path, found on the worker's PATH as exec would find it."""
    if os.path.isabs(name):
        return name
    found = shutil.which(name)
    if found is None:
        raise ToolError(f"{name} is not installed, so the command was not run")
    return found


@functools.cache
def _interpreter() -> tuple[str, str | None]:
    """The interpreter the init runs on, and the folder the view must add for it (None:
    it is in the system's view already). The system's python3 first: a worker's own may
    live where its user cannot even resolve the path (pyenv under a root-only home)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate, None
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return base, os.path.realpath(sys.base_prefix)


def proxy_environment(network: str) -> dict[str, str]:
    """The variables that send a command's HTTP through the proxy (none without one)."""
    if network != "proxy":
        return {}
    return dict.fromkeys(PROXY_VARIABLES, PROXY_URL) | {"no_proxy": NO_PROXY, "NO_PROXY": NO_PROXY}


async def serve_proxy(channel: socket.socket, fetch_allow: Sequence[str]) -> None:
    """Take the listener the sandbox hands over on `channel` and serve the egress proxy
    on it until cancelled; nothing if the sandbox closed the channel without one."""
    try:
        listener = await _received_listener(channel)
    finally:
        channel.close()
    if listener is None:
        return
    from noeta.plugins.core.egress_proxy import EgressProxy  # only where a command runs
    from noeta.plugins.core.web_access import FetchPolicy

    await EgressProxy(FetchPolicy.parse(fetch_allow)).serve(listener)


async def _received_listener(channel: socket.socket) -> socket.socket | None:
    loop = asyncio.get_running_loop()
    channel.setblocking(False)
    readable = asyncio.Event()
    loop.add_reader(channel.fileno(), readable.set)
    try:
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(channel, 64, 1)
            except BlockingIOError:
                readable.clear()
                await readable.wait()
                continue
            return socket.socket(fileno=fds[0]) if fds else None
    finally:
        loop.remove_reader(channel.fileno())

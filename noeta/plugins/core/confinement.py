"""What a command run for a task may reach: the system read-only, its task's workspace
read-write, the paths the operator lists, and the network its `network:` mode opens.
Namespaces made by bubblewrap draw that view (sandbox.py, ADR-0077); Landlock keeps it
as a second layer where the kernel has it (ADR-0048).

`confine: auto` (the default) confines as far as the machine can and warns once for what
it cannot; `required` refuses to start without namespaces; `off` runs commands as the
worker's user, on the worker's network.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from noeta.core.errors import ConfigError
from noeta.core.ports.tool import ToolError
from noeta.plugins.core import landlock, sandbox
from noeta.plugins.core.landlock import Availability
from noeta.plugins.core.sandbox import NETWORK_MODES, Bubblewrap, Limits, View

log = logging.getLogger("noeta.plugins.core.confinement")

MODES = ("auto", "required", "off")
# Enough for ordinary commands (a shell, coreutils, git, python3, DNS) and no more.
SYSTEM_EXECUTABLE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# Not /dev as a whole: as root, reading a disk device would read every file on it.
SYSTEM_READABLE = ("/etc", "/proc", "/sys", "/run/systemd/resolve")
DEVICES_WRITABLE = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
)
_READ = landlock.READ_FILE | landlock.READ_DIR
_EXECUTE = _READ | landlock.EXECUTE
_DEVICE = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE  # `> /dev/null`
_EVERYTHING = ~0  # masked by what the ABI handles


@dataclass(slots=True)
class Prepared:
    """How to start one command: its argv, what its child calls before exec (Landlock
    without namespaces), the descriptors it inherits, and the proxy's channel."""

    argv: list[str]
    enter: Callable[[], None] | None = None
    pass_fds: tuple[int, ...] = ()
    channel: object | None = None  # socket.socket: the sandbox hands its listener over


@dataclass(frozen=True)
class Confinement:
    """The core plugin's confinement settings. `probe` says what Landlock the kernel
    offers and `wrap` whether bubblewrap can make namespaces (tests pass ones that say
    "unavailable"; the rules themselves always meet the real kernel)."""

    mode: str = "auto"
    read_paths: tuple[str, ...] = ()  # the operator's, read and execute
    write_paths: tuple[str, ...] = ()  # the operator's, read, write and create
    network: str = "proxy"
    limits: Limits = field(default_factory=Limits)
    fetch_allow: tuple[str, ...] = ()  # opened to commands through the proxy as to WebFetch
    probe: Callable[[], Availability] = field(default=landlock.kernel_availability)
    wrap: Callable[[], Bubblewrap | Availability] = field(default=sandbox.bubblewrap)

    def availability(self) -> Availability:
        if self.mode == "off":
            return Availability(0, "confine: off")
        return self.probe()

    def namespaces(self) -> Bubblewrap | None:
        if self.mode == "off":
            return None
        wrap = self.wrap()
        return wrap if isinstance(wrap, Bubblewrap) else None

    def network_mode(self) -> str:
        """The network commands get: `network:` inside namespaces, else the worker's."""
        return self.network if self.namespaces() is not None else "host"

    def check_at_start(self) -> None:
        """Refuse what cannot be kept (ConfigError); say once how commands are confined."""
        for path in (*self.read_paths, *self.write_paths):
            if not os.path.exists(path):
                raise ConfigError(f"core plugin: confined path {path!r} does not exist")
        if self.mode == "off":
            log.warning(
                "Bash commands are not confined (confine: off): they can read every file "
                "the worker's user can and reach every address the worker can"
            )
            return
        wrap, available = self.wrap(), self.availability()
        if not isinstance(wrap, Bubblewrap):
            if self.mode == "required":
                raise ConfigError(
                    f"core plugin: confine: required, but {wrap.reason}; Bash commands "
                    "cannot be confined on this machine"
                )
            log.warning(
                "Bash commands run without namespaces: %s. They share the worker's "
                "network and processes%s; set confine: required to refuse to start instead",
                wrap.reason,
                f", confined to their files by {available.reason}"
                if available.abi
                else f", and can read every file the worker's user can ({available.reason})",
            )
            return
        log.info(
            "Bash commands are confined in namespaces (network: %s)%s: the workspace "
            "read-write, %d operator path(s) read-only, %d read-write",
            self.network,
            f" and by {available.reason}" if available.abi else "",
            len(self.read_paths),
            len(self.write_paths),
        )
        if self.network == "host":
            log.warning(
                "Bash commands share the worker's network (network: host): they can reach "
                "loopback services, the database and private addresses"
            )

    def view(self, workspace: str, *, network: str | None = None) -> View:
        """A task's command's view: its workspace, the operator's paths, and the shared
        `.git` of the repository its worktree belongs to, if any."""
        shared = shared_git_dir(workspace)
        return View(
            workspace,
            readable=tuple(self.read_paths),
            writable=(*self.write_paths, *((shared,) if shared else ())),
            network=network or self.network,
        )

    @contextlib.contextmanager
    def prepared(self, command: Sequence[str], view: View) -> Iterator[Prepared]:
        """How to start `command` confined to `view`; the parent's ends of what it built
        (the ruleset, the channel's child end) are closed when the block ends."""
        available, wrap = self.availability(), self.namespaces()
        if wrap is None and self.mode == "required":
            missing = self.wrap()
            why = missing.reason if isinstance(missing, Availability) else "it cannot be"
            raise ToolError(f"Bash commands must be confined, but {why}")
        with contextlib.ExitStack() as stack:
            ruleset = stack.enter_context(self._ruleset(available, view)) if available.abi else None
            if wrap is not None:
                fd = ruleset.fd if ruleset is not None else None
                plan = stack.enter_context(sandbox.planned(wrap, command, view, self.limits, fd))
                yield Prepared(plan.argv, None, plan.pass_fds, plan.channel)
            else:
                yield Prepared(list(command), ruleset.entry() if ruleset else None)

    @contextlib.contextmanager
    def _ruleset(self, available: Availability, view: View) -> Iterator[landlock.Ruleset]:
        try:
            ruleset = landlock.Ruleset(available.abi)
        except OSError as error:
            raise ToolError(f"could not confine the command: {error}") from error
        try:
            try:
                for path, rights in self._rules(view):
                    ruleset.allow(path, rights)
            except OSError as error:
                raise ToolError(f"could not confine the command: {error}") from error
            yield ruleset
        finally:
            ruleset.close()

    def search_path(self, path: str, workspace: str) -> str:
        """`path` (a PATH value) without the folders a confined command cannot run from,
        so a command is found where it can run rather than refused where it cannot."""
        if not self.availability().abi and self.namespaces() is None:
            return path
        allowed = [
            os.path.realpath(p)
            for p in (*SYSTEM_EXECUTABLE, *self.read_paths, *self.write_paths, workspace)
        ]
        kept = [p for p in path.split(os.pathsep) if _beneath(os.path.realpath(p), allowed)]
        return os.pathsep.join(kept)

    def _rules(self, view: View) -> Iterator[tuple[str, int]]:
        yield from ((path, _EXECUTE) for path in SYSTEM_EXECUTABLE)
        yield from ((path, _READ) for path in SYSTEM_READABLE)
        yield from ((path, _DEVICE) for path in DEVICES_WRITABLE)
        yield from ((path, _EXECUTE) for path in view.readable)
        yield from ((path, _EVERYTHING) for path in (view.workspace, *view.writable))


def _beneath(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def shared_git_dir(workspace: str) -> str | None:
    """The `.git` of a sibling workspace whose repository this workspace is a linked
    worktree of (a subagent's, made by the Agent tool), or None."""
    linked = linked_worktree(workspace)
    return linked[0] if linked else None


def linked_worktree(workspace: str) -> tuple[str, str] | None:
    """The shared `.git` and this worktree's own folder in it (`.git/worktrees/<name>`),
    where `workspace` is a linked worktree of a sibling's repository; else None.

    The workspace's own `.git` file is the command's to rewrite, so it is believed only
    when the repository it names lists this very worktree back (git's `gitdir` file in
    `.git/worktrees/<name>/`), which a command cannot write outside its own workspace.
    """
    own = os.path.join(workspace, ".git")
    pointer = _small_file(own)
    if pointer is None or not pointer.startswith("gitdir: "):
        return None
    gitdir = os.path.realpath(os.path.join(workspace, pointer.removeprefix("gitdir: ").strip()))
    common = os.path.dirname(os.path.dirname(gitdir))  # <sibling>/.git/worktrees/<name>
    if os.path.basename(os.path.dirname(gitdir)) != "worktrees" or not common.endswith("/.git"):
        return None
    if os.path.dirname(os.path.dirname(common)) != os.path.dirname(workspace):
        return None  # not a sibling workspace under the same root
    backlink = _small_file(os.path.join(gitdir, "gitdir"))
    if backlink is None or os.path.realpath(backlink.strip()) != os.path.realpath(own):
        return None
    return common, gitdir


def _small_file(path: str) -> str | None:
    """A regular file's first 4 KiB, never following a link or waiting on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 4096).decode("utf-8", "replace")
    finally:
        os.close(fd)


def parse_confinement(params: dict[str, object]) -> Confinement:
    """`confine:`, `confine_read:`, `confine_write:`, `network:` and `limits:` of the core
    plugin (with `fetch_allow:`, which the proxy applies too); ValueError."""
    mode = params.get("confine", "auto")
    if mode not in MODES:
        raise ValueError(f"core plugin: confine must be one of {', '.join(MODES)}, not {mode!r}")
    network = params.get("network", "proxy")
    if network not in NETWORK_MODES:
        raise ValueError(
            f"core plugin: network must be one of {', '.join(NETWORK_MODES)}, not {network!r}"
        )
    fetch_allow = params.get("fetch_allow") or []
    opened = tuple(str(e) for e in fetch_allow) if isinstance(fetch_allow, list) else ()
    return Confinement(
        str(mode),
        _paths(params, "confine_read"),
        _paths(params, "confine_write"),
        network=str(network),
        limits=sandbox.parse_limits(params.get("limits")),
        fetch_allow=opened,
    )


def _paths(params: dict[str, object], key: str) -> tuple[str, ...]:
    value = params.get(key) or []
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ValueError(f"core plugin: {key} must be a list of absolute paths")
    paths = tuple(os.path.expanduser(p) for p in value)
    for path in paths:
        if not os.path.isabs(path) or "\x00" in path:
            raise ValueError(f"core plugin: {key}: {path!r} is not an absolute path")
    return paths


def check_tools_at_start(tools: Iterable[object]) -> None:
    """At `noeta worker`/`noeta run` start: each Bash tool's confinement is checked and
    announced once (ConfigError when it is required and cannot be had)."""
    for confinement in {getattr(tool, "confinement", None) for tool in tools}:
        if isinstance(confinement, Confinement):
            confinement.check_at_start()

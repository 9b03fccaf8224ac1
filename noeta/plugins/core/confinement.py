"""What a Bash command may reach on the filesystem: the system read-only, its task's
workspace read-write, and the paths the operator lists; enforced by Landlock (ADR-0048).

`confine: auto` (the default) confines where the kernel can and warns once where it
cannot; `required` refuses to start there; `off` runs commands as the worker's user.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from noeta.core.errors import ConfigError
from noeta.core.tool import ToolError
from noeta.plugins.core import landlock
from noeta.plugins.core.landlock import Availability

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


@dataclass(frozen=True)
class Confinement:
    """The core plugin's confinement setting; `probe` says what the kernel offers (tests
    pass one that says "unavailable"; the rules themselves always meet the real kernel)."""

    mode: str = "auto"
    read_paths: tuple[str, ...] = ()  # the operator's, read and execute
    write_paths: tuple[str, ...] = ()  # the operator's, read, write and create
    probe: Callable[[], Availability] = field(default=landlock.kernel_availability)

    def availability(self) -> Availability:
        if self.mode == "off":
            return Availability(0, "confine: off")
        return self.probe()

    def check_at_start(self) -> None:
        """Refuse what cannot be kept (ConfigError); say once whether commands are confined."""
        available = self.availability()
        if self.mode == "required" and not available.abi:
            raise ConfigError(
                f"core plugin: confine: required, but {available.reason}; Bash commands "
                "cannot be confined on this machine"
            )
        for path in (*self.read_paths, *self.write_paths):
            if not os.path.exists(path):
                raise ConfigError(f"core plugin: confined path {path!r} does not exist")
        if available.abi:
            log.info(
                "Bash commands are confined by %s: the workspace read-write, %d operator "
                "path(s) read-only, %d read-write",
                available.reason,
                len(self.read_paths),
                len(self.write_paths),
            )
        elif self.mode == "off":
            log.warning(
                "Bash commands are not confined (confine: off): they can read "
                "every file the worker's user can"
            )
        else:
            log.warning(
                "Bash commands are not confined: %s. They can read every file the "
                "worker's user can; set confine: required to refuse to start instead",
                available.reason,
            )

    @contextlib.contextmanager
    def entry(self, workspace: str) -> Iterator[Callable[[], None] | None]:
        """What the child of a command in `workspace` calls before exec (None: unconfined).

        The ruleset is built here, in the parent, and closed when the block ends, after
        the child has entered it.
        """
        available = self.availability()
        if not available.abi:
            if self.mode == "required":
                raise ToolError(f"Bash commands must be confined, but {available.reason}")
            yield None
            return
        try:
            ruleset = landlock.Ruleset(available.abi)
        except OSError as error:
            raise ToolError(f"could not confine the command: {error}") from error
        try:
            try:
                for path, rights in self._rules(workspace):
                    ruleset.allow(path, rights)
            except OSError as error:
                raise ToolError(f"could not confine the command: {error}") from error
            yield ruleset.entry()
        finally:
            ruleset.close()

    def search_path(self, path: str, workspace: str) -> str:
        """`path` (a PATH value) without the folders a confined command cannot run from,
        so a command is found where it can run rather than refused where it cannot."""
        if not self.availability().abi:
            return path
        allowed = [
            os.path.realpath(p)
            for p in (*SYSTEM_EXECUTABLE, *self.read_paths, *self.write_paths, workspace)
        ]
        kept = [p for p in path.split(os.pathsep) if _beneath(os.path.realpath(p), allowed)]
        return os.pathsep.join(kept)

    def _rules(self, workspace: str) -> Iterator[tuple[str, int]]:
        yield from ((path, _EXECUTE) for path in SYSTEM_EXECUTABLE)
        yield from ((path, _READ) for path in SYSTEM_READABLE)
        yield from ((path, _DEVICE) for path in DEVICES_WRITABLE)
        yield from ((path, _EXECUTE) for path in self.read_paths)
        yield from ((path, _EVERYTHING) for path in (*self.write_paths, workspace))
        if (shared := shared_git_dir(workspace)) is not None:
            yield shared, _EVERYTHING


def _beneath(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def shared_git_dir(workspace: str) -> str | None:
    """The `.git` of a sibling workspace whose repository this workspace is a linked
    worktree of (a subagent's, made by the Agent tool), or None.

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
    return common


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
    """`confine:`, `confine_read:` and `confine_write:` of the core plugin; ValueError."""
    mode = params.get("confine", "auto")
    if mode not in MODES:
        raise ValueError(f"core plugin: confine must be one of {', '.join(MODES)}, not {mode!r}")
    return Confinement(str(mode), _paths(params, "confine_read"), _paths(params, "confine_write"))


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

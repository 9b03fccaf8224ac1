"""Workspace confinement: every path a core tool touches is checked by `confine`, and
every file it reads or writes is opened by `open_confined`.

A path is relative to the task's workspace and must stay inside it after symbolic links
are followed; an empty workspace means the task has no file access at all. The open
walks the checked path again from the workspace's directory descriptor without following
any link, so a link swapped in between the check and the use fails instead of leading out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from noeta.core.ports.tool import ToolContext, ToolError

NO_WORKSPACE = "no file access: this task has no workspace"


def workspace_root(ctx: ToolContext) -> Path:
    """The task's workspace, created if missing, with its own symbolic links resolved.

    Resolving the root itself lets a workspace live under a linked directory (macOS /tmp)
    while links *inside* it are still judged by where they lead.
    """
    if not ctx.workspace:
        raise ToolError(NO_WORKSPACE)
    root = Path(ctx.workspace)
    try:
        root.mkdir(parents=True, exist_ok=True)
        return root.resolve(strict=True)
    except (OSError, RuntimeError) as error:
        raise ToolError(f"the workspace {ctx.workspace!r} is not usable: {error}") from error


def check_relative(path: str, what: str = "path") -> PurePosixPath:
    """Refuse, before touching the disk, what can only name a place outside the workspace."""
    if not path:
        raise ToolError(f"the {what} is empty")
    if "\x00" in path:
        raise ToolError(f"the {what} {path!r} contains a NUL character")
    pure = PurePosixPath(path)
    if pure.is_absolute() or os.path.isabs(path):
        raise ToolError(
            f"the {what} {path!r} is absolute; give it relative to the workspace "
            f"(e.g. 'src/main.py')"
        )
    # Any '..' is refused, even one that would come back inside: the rule stays simple
    # to state, and a normalised path is always available to the model.
    if ".." in pure.parts:
        raise ToolError(f"the {what} {path!r} contains '..'; paths may not leave the workspace")
    return pure


def confine(root: Path, path: str) -> Path:
    """The one check: `path` (relative to `root`) as a real path that stays inside `root`.

    Symbolic links are followed, including dangling ones (a write would create their
    target), so a link leading outside is refused wherever it sits on the path.
    """
    pure = check_relative(path)
    try:
        real = (root / pure).resolve(strict=False)
    except (OSError, RuntimeError) as error:  # RuntimeError: a symbolic link loop
        raise ToolError(f"the path {path!r} cannot be resolved: {error}") from error
    if not real.is_relative_to(root):
        raise ToolError(
            f"the path {path!r} resolves to {str(real)!r}, outside the workspace "
            "(through a symbolic link); only files inside the workspace are allowed"
        )
    return real


def relative_name(root: Path, real: Path) -> str:
    """How a tool shows a confined path to the model: relative, with '/' separators."""
    relative = real.relative_to(root)
    return relative.as_posix() if relative.parts else "."


def walk_files(root: Path, start: Path, skip_dirs: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Real paths of the files under `start`, in sorted order, each passed by `confine`.

    Linked directories are not descended (`os.walk` default), and a linked file counts
    only if it leads inside the workspace, so a search never reads outside it.
    """
    if start.is_file():
        yield start
        return
    for directory, subdirectories, files in os.walk(start):
        subdirectories[:] = sorted(name for name in subdirectories if name not in skip_dirs)
        for name in sorted(files):
            candidate = Path(directory, name)
            try:
                real = confine(root, candidate.relative_to(root).as_posix())
            except ToolError:
                continue
            if real.is_file():
                yield real


def open_confined(
    root: Path, real: Path, flags: int = os.O_RDONLY, *, make_parents: bool = False
) -> BinaryIO:
    """Open `real` (a path `confine` returned) as a binary file, one component at a time
    from `root`'s descriptor with O_NOFOLLOW; only a regular file is opened.

    `flags` adds to the access mode (O_WRONLY | O_CREAT | O_TRUNC to write); new files
    get 0666 less the umask. `make_parents` creates missing folders on the way.
    """
    parts = real.relative_to(root).parts
    if not parts:
        raise ToolError("the workspace itself is a directory, not a file")
    shown = "/".join(parts)
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = _step_into(directory, part, make_parents)
            os.close(directory)
            directory = inner
        # O_NONBLOCK: opening a FIFO someone made must not hang the worker's thread.
        extra = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        descriptor = os.open(parts[-1], flags | extra, 0o666, dir_fd=directory)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise ToolError(
                f"the path {shown!r} changed while it was being opened (a symbolic link or "
                "file appeared where a folder was); only files inside the workspace are allowed"
            ) from None
        raise
    finally:
        os.close(directory)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ToolError(f"{shown} is not a regular file")
    os.set_blocking(descriptor, True)
    writing = flags & (os.O_WRONLY | os.O_RDWR)
    return os.fdopen(descriptor, "r+b" if flags & os.O_RDWR else "wb" if writing else "rb")


def _step_into(directory: int, part: str, make_parents: bool) -> int:
    """The descriptor of folder `part` inside `directory`, never through a link."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(part, flags, dir_fd=directory)
    except FileNotFoundError:
        if not make_parents:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: the open refuses a link
        os.mkdir(part, dir_fd=directory)
    return os.open(part, flags, dir_fd=directory)

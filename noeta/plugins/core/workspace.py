"""Workspace confinement: every path a core tool touches is checked by `confine`.

A path is relative to the task's workspace and must stay inside it after symbolic links
are followed; an empty workspace means the task has no file access at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from noeta.core.tool import ToolContext, ToolError

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


def resolve_path(ctx: ToolContext, path: str) -> Path:
    """`confine` against the task's workspace: what a file tool calls first."""
    return confine(workspace_root(ctx), path)


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

"""A fork's `--workspace copy` (ADR-0096): the fork's workspace made, once, a copy of its
source's as it is now. The source is hostile (a model wrote it): links are copied as links,
never followed; FIFOs, sockets and devices are skipped; bytes and entries are bounded."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass

from noeta.core.ports.tool import ToolError
from noeta.core.ports.workspace_copy import WorkspaceNotCopied
from noeta.plugins.core import worktrees
from noeta.plugins.core.worktrees import Worktrees

log = logging.getLogger(__name__)

# Beside the task folders, under the workspaces root: a leading '.' is never a task's folder
# (task_id.py), and a task's commands cannot write outside their own folder.
COPIED_MARKS = ".workspace-copies"  # <root>/.workspace-copies/<fork's folder>: made once
_PARTIAL = ".workspace-copy-"  # <root>/.workspace-copy-<fork's folder>.<random>: under way
_CHUNK = 1 << 20
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# An entry swapped for a link, a file or a FIFO since it was looked at, removed (the source
# may be running), or one its task made unreadable: left out, as a FIFO is.
_GONE_OR_UNREADABLE = (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ENXIO, errno.EACCES)


@dataclass(frozen=True, slots=True)
class CopyLimits:
    """What a copy may hold: files' bytes by apparent size (a sparse file counts whole),
    entries (files, folders, links), and folder depth."""

    max_bytes: int = 1 << 30
    max_entries: int = 100_000
    max_depth: int = 64


@dataclass
class _Budget:
    limits: CopyLimits
    bytes: int = 0
    entries: int = 0
    skipped: int = 0  # FIFOs, sockets, devices: nothing a copy can hold

    def take(self, size: int) -> None:
        self.entries += 1
        self.bytes += size
        if self.entries > self.limits.max_entries:
            raise WorkspaceNotCopied(f"it holds over {self.limits.max_entries} entries")
        if self.bytes > self.limits.max_bytes:
            raise WorkspaceNotCopied(f"it holds over {self.limits.max_bytes} bytes")


def copy_tree(source: str, destination: str, limits: CopyLimits, skip: frozenset[str]) -> int:
    """Copy folder `source` into the new folder `destination` (names in `skip` left out at
    its top); the number of entries skipped. Blocking: call it off the event loop."""
    try:
        top = os.open(source, _DIRECTORY)
    except FileNotFoundError:
        raise WorkspaceNotCopied(f"there is none on this host ({source})") from None
    except OSError as error:
        raise WorkspaceNotCopied(f"{source} is not a folder ({error.strerror})") from None
    budget = _Budget(limits)
    try:
        _copy_folder(top, destination, budget, skip, depth=0)
    finally:
        os.close(top)
    return budget.skipped


def _copy_folder(
    folder: int, destination: str, budget: _Budget, skip: frozenset[str], depth: int
) -> None:
    if depth > budget.limits.max_depth:
        raise WorkspaceNotCopied(f"its folders nest over {budget.limits.max_depth} deep")
    names = []
    room = budget.limits.max_entries - budget.entries
    with os.scandir(folder) as entries:
        for entry in entries:  # bounded as it is read: a folder may hold millions
            names.append(entry.name)
            if len(names) > room:
                raise WorkspaceNotCopied(f"it holds over {budget.limits.max_entries} entries")
    for name in sorted(set(names) - skip):
        try:
            found = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed meanwhile: the source task may be running
        target = os.path.join(destination, name)
        mode = found.st_mode
        if stat.S_ISLNK(mode):
            link = os.readlink(name, dir_fd=folder)
            budget.take(len(os.fsencode(link)))
            os.symlink(link, target)  # as a link: where it leads is never read
        elif stat.S_ISDIR(mode):
            budget.take(0)
            _copy_subfolder(folder, name, target, budget, depth, stat.S_IMODE(mode))
        elif stat.S_ISREG(mode):
            budget.take(found.st_size)  # refused before a byte is read
            _copy_file(folder, name, target, budget, stat.S_IMODE(mode))
        else:
            budget.skipped += 1  # FIFOs, sockets, devices: never opened


def _copy_subfolder(
    folder: int, name: str, target: str, budget: _Budget, depth: int, mode: int
) -> None:
    try:
        inner = os.open(name, _DIRECTORY, dir_fd=folder)
    except OSError as error:
        if error.errno in _GONE_OR_UNREADABLE:
            budget.skipped += 1
            return
        raise
    try:
        os.mkdir(target, 0o700)
        _copy_folder(inner, target, budget, frozenset(), depth + 1)
        os.chmod(target, (mode & 0o777) | 0o700)
    finally:
        os.close(inner)


def _copy_file(folder: int, name: str, target: str, budget: _Budget, mode: int) -> None:
    # O_NONBLOCK: a FIFO swapped in after the look must not hang the copy.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        reading = os.open(name, flags, dir_fd=folder)
    except OSError as error:
        if error.errno in _GONE_OR_UNREADABLE:
            budget.skipped += 1
            return
        raise
    try:
        opened = os.fstat(reading)
        if not stat.S_ISREG(opened.st_mode):
            budget.skipped += 1
            return
        os.set_blocking(reading, True)
        left = opened.st_size  # no more than it held when looked at: growth is not copied
        made = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode & 0o777)
        with os.fdopen(made, "wb") as writing:  # buffered: a short write is written on
            while left > 0:
                chunk = os.read(reading, min(_CHUNK, left))
                if not chunk:
                    break
                writing.write(chunk)
                left -= len(chunk)
    finally:
        os.close(reading)


class WorkspaceCopies:
    """The core plugin's WorkspaceCopier: a plain copy, or for a git workspace a worktree
    of the same repository on the fork's branch holding a copy of the source's files."""

    def __init__(self, git: Worktrees | None = None, limits: CopyLimits | None = None) -> None:
        self.git = git or Worktrees()
        self.limits = limits or CopyLimits()

    async def copy(self, source: str, target: str, branch: str) -> None:
        root, folder = os.path.split(target)
        mark = os.path.join(root, COPIED_MARKS, folder)
        if await asyncio.to_thread(os.path.lexists, mark):
            return  # made once already: the fork's own files are never copied over
        common = await asyncio.to_thread(worktrees.repository, source)
        partial = ""
        try:
            partial = await asyncio.to_thread(_start, root, folder)
            skip = frozenset({".git"}) if common else frozenset()
            skipped = await asyncio.to_thread(copy_tree, source, partial, self.limits, skip)
            # An earlier attempt cut short before its mark left this: the fork has not run.
            await self.git.remove(source, target, branch, keep_work=False)
            await asyncio.to_thread(_remove, target)
            if common is None:
                await asyncio.to_thread(os.rename, partial, target)
            else:
                await self.git.add(source, target, branch, checkout=False)
                await asyncio.to_thread(_move_entries, partial, target)
            await asyncio.to_thread(_mark, mark)
        except (ToolError, OSError) as error:
            # What this attempt made of the fork's folder goes: the fork fails unrun.
            await asyncio.to_thread(_remove, target)
            why = str(error) if isinstance(error, ToolError) else error.strerror
            raise WorkspaceNotCopied(f"the copy failed: {why}") from None
        finally:
            if partial:
                await asyncio.to_thread(shutil.rmtree, partial, True)
        if skipped:
            log.info(
                "%s: %d FIFOs, sockets, devices or unreadable entries left out", target, skipped
            )


def _start(root: str, folder: str) -> str:
    """A new folder for the copy under way, earlier attempts' leftovers removed."""
    os.makedirs(root, exist_ok=True)
    prefix = f"{_PARTIAL}{folder}."
    for name in os.listdir(root):
        # Never another fork's: "f.x"'s partial is ".workspace-copy-f.x.<random>".
        if name.startswith(prefix) and "." not in name[len(prefix) :]:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{_PARTIAL}{folder}.", dir=root)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # fd-based: follows no link
        else:
            os.unlink(path)


def _move_entries(partial: str, target: str) -> None:
    for name in os.listdir(partial):
        os.rename(os.path.join(partial, name), os.path.join(target, name))


def _mark(mark: str) -> None:
    os.makedirs(os.path.dirname(mark), exist_ok=True)
    with open(mark, "x", encoding="utf-8"):
        pass

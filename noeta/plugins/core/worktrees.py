"""The Agent tool's git worktrees. Every git command the worker runs for a task runs in
that task's sandbox with no network, and with hooks, filters, fsmonitor, signing and the
system and global config switched off; the repository is the one the worker found and
checked, never one that a `.git` file the task could write points to (ADR-0078).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
from collections.abc import Sequence

from noeta.core.ports.tool import ToolError
from noeta.plugins.core.confinement import Confinement, linked_worktree, shared_git_dir
from noeta.plugins.core.sandbox import View

GIT_TIMEOUT_SECONDS = 60.0
# Nothing in the repository's own config may make git run a program: the task wrote it.
_SWITCHED_OFF = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "commit.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",
    "submodule.recurse=false",
    "diff.ignoreSubmodules=all",
)
_FILTER_KEYS = ("clean", "smudge", "process")
_IDENTITY = ("user.name=noeta", "user.email=noeta@localhost")


def repository(workspace: str) -> str | None:
    """The `.git` folder of the repository `workspace` works in, as the worker checked
    it: the workspace's own `.git` folder (not a link), or the shared `.git` of a sibling
    whose linked worktree this is and which lists it back; else None. Blocking: call it
    off the event loop."""
    own = os.path.join(workspace, ".git")
    try:
        mode = os.lstat(own).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return os.path.realpath(own)
    if stat.S_ISREG(mode):
        return shared_git_dir(workspace)
    return None


class Worktrees:
    """Adding and removing a child's worktree, each git command confined."""

    def __init__(self, confinement: Confinement | None = None) -> None:
        self.confinement = confinement or Confinement()

    async def add(self, workspace: str, target: str, branch: str, *, checkout: bool = True) -> None:
        """A worktree of `workspace`'s own repository at `target`, on a new `branch`.
        Without `checkout` its files are left for the caller to put there (a fork's copy
        of the workspace as it is, ADR-0096): the index is the branch's, the folder empty,
        and a `branch` left by an earlier attempt is made anew."""
        common = await asyncio.to_thread(repository, workspace)
        if common is None:
            raise ToolError(f"workspace 'worktree' needs a git repository; {workspace} is not one")
        try:
            await asyncio.to_thread(os.mkdir, target)  # never follows a link planted there
        except FileExistsError:
            raise ToolError(f"the subagent's worktree path {target} exists already") from None
        except OSError as error:
            raise ToolError(f"could not make the subagent's worktree: {error.strerror}") from None
        view = self._view(workspace, common, target)
        how = ("-b", branch) if checkout else ("--no-checkout", "-B", branch)
        await self._git(view, common, "worktree", "add", "-q", *how, target, "HEAD")
        if not checkout:
            await self._git(self._view(target, common), common, "reset", "-q")

    async def remove(self, workspace: str, target: str, branch: str, *, keep_work: bool) -> None:
        """Commit what the child left (if `keep_work`), then remove its worktree; its
        branch goes too unless its work is kept. Nothing happens unless `target` is a
        worktree of `workspace`'s repository that git itself recorded (or, where the
        launching task's own worktree is gone already, of the repository both shared)."""
        linked = await asyncio.to_thread(linked_worktree, target)
        if linked is None:
            return  # no worktree of ours: a folder, or a `.git` the child made itself
        recorded, administration = linked
        if await asyncio.to_thread(os.path.lexists, workspace):
            common = await asyncio.to_thread(repository, workspace)
        else:
            common = recorded  # a nested child that outlived its cancelled parent
        if recorded != common:
            return
        child = self._view(target, common)
        if keep_work and await self._git(child, common, "status", "--porcelain"):
            await self._git(child, common, "add", "-A")
            message = f"noeta: what subagent {os.path.basename(target)} left uncommitted"
            await self._git(child, common, "commit", "-q", "--no-verify", "-m", message)
        # What `git worktree remove` does, done by the worker: git in a view without the
        # other worktrees would take them all for gone.
        for folder in (target, administration):
            try:
                await asyncio.to_thread(shutil.rmtree, folder)  # fd-based: follows no link
            except OSError as error:
                raise ToolError(f"could not remove the worktree: {error.strerror}") from None
        if not keep_work:
            await self._git(View(common, network="none"), common, "branch", "-q", "-D", branch)

    def _view(self, workspace: str, common: str, *writable: str) -> View:
        inside = common.startswith(os.path.realpath(workspace).rstrip("/") + "/")
        shared = () if inside else (common,)
        return View(workspace, writable=(*shared, *writable), network="none")

    async def _git(self, view: View, common: str, *arguments: str) -> str:
        """git with `arguments` in `view.workspace`, confined to `view`; its output, or
        a ToolError with what git said."""
        switched_off = [*_SWITCHED_OFF, *_IDENTITY, *await self._filters_off(view, common)]
        options = [part for setting in switched_off for part in ("-c", setting)]
        return await self._run(view, common, options, arguments)

    async def _filters_off(self, view: View, common: str) -> list[str]:
        """`filter.<driver>.*` emptied for every driver the repository's config names:
        a smudge or clean filter is a program the task chose."""
        listed = await self._run(
            view, common, [], ["config", "--name-only", "--get-regexp", r"^filter\."], ok=(0, 1)
        )
        drivers = {name.rpartition(".")[0] for name in listed.splitlines() if name}
        for driver in drivers:
            if "=" in driver or "\n" in driver:
                raise ToolError("the repository's config names a filter git cannot switch off")
        off = [f"{driver}.{key}=" for driver in sorted(drivers) for key in _FILTER_KEYS]
        return off + [f"{driver}.required=false" for driver in sorted(drivers)]

    async def _run(
        self,
        view: View,
        common: str,
        options: Sequence[str],
        arguments: Sequence[str],
        ok: Sequence[int] = (0,),
    ) -> str:
        command = ["git", *options, *arguments]
        environment = {
            "PATH": "/usr/bin:/bin",
            "HOME": view.workspace,
            "LC_ALL": "C",
            "GIT_DIR": common if view.workspace == common else "",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
        }
        environment = {name: value for name, value in environment.items() if value}
        with self.confinement.prepared(command, view) as prepared:
            process = await asyncio.create_subprocess_exec(
                *prepared.argv,
                cwd=view.workspace,
                env=environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=prepared.pass_fds,
                preexec_fn=prepared.enter,  # pre-bound calls only (landlock.py)
            )
        try:
            out, err = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT_SECONDS)
        except TimeoutError:
            raise ToolError(f"git {arguments[0]} took over {GIT_TIMEOUT_SECONDS:g} s") from None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # its sandbox and all it started
            await process.wait()
        if process.returncode not in ok:
            said = err.decode("utf-8", "replace").strip().splitlines()
            why = said[-1] if said else f"exit code {process.returncode}"
            raise ToolError(f"git {arguments[0]} failed: {why}")
        return out.decode("utf-8", "replace")

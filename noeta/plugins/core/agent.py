"""The Agent tool: launch a subagent (a subtask) and get its final report as the result.

The runner creates the child in one append with the call's wait (`noeta.core.runner.
children`); this tool checks the input and prepares the child's workspace: a git worktree
on branch `noeta/<child id>` when the task's workspace is a git repository, else a folder
of its own. `recover` removes a worktree that a launch cut short left behind.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from noeta.core import subtasks
from noeta.core.payload import JSONValue
from noeta.core.task_id import workspace_folder
from noeta.core.tool import SubtaskRequest, ToolContext, ToolError, ToolFlags, ToolOutput

WORKSPACE_MODES = ("auto", "worktree", "folder")
GIT_TIMEOUT_SECONDS = 60.0


_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "minLength": 1, "description": "The task, in full."},
        "description": {"type": "string", "description": "A few words on the task."},
        "model": {"type": "string", "description": "A model spec; default: yours."},
        "tools": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The tools it may use (a subset of yours); default: yours.",
        },
        "workspace": {
            "enum": list(WORKSPACE_MODES),
            "description": "worktree (needs a git workspace), folder, or auto (default).",
        },
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


class Agent:
    name = "Agent"
    description = (
        "Launch a subagent: a new agent that works on `prompt` on its own, with a subset "
        "of your tools, and returns its final report as this call's result. Several Agent "
        "calls in one reply run at the same time. In a git workspace the subagent works "
        "in its own git worktree (branch noeta/<its id>), else in its own folder."
    )
    input_schema = _SCHEMA
    flags = ToolFlags(launches_subtasks=True)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        prompt = str(input["prompt"]).strip()
        if not prompt:
            raise ToolError("Agent needs a prompt: say what the subagent should do")
        if not ctx.subtask_id:
            raise ToolError("Agent can only run under the noeta runner (no subtask id)")
        mode = str(input.get("workspace", "auto"))
        worktree = await self._prepare(mode, ctx)
        tools = input.get("tools")
        request = SubtaskRequest(
            prompt,
            str(input.get("description", "")),
            str(input.get("model", "")),
            tuple(str(name) for name in tools) if isinstance(tools, list) else None,
        )
        where = f" in worktree {worktree}" if worktree else ""
        return ToolOutput(f"launching subagent {ctx.subtask_id}{where}", subtask=request)

    async def recover(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        # The launch and the call's wait are one append: a half-done call started nothing.
        if ctx.subtask_id:
            await self.remove_workspace(ctx.subtask_id, ctx, keep_work=False)
        return ToolOutput(subtasks.NOT_STARTED, is_error=True)

    async def _prepare(self, mode: str, ctx: ToolContext) -> str:
        """Make the child's git worktree if the mode and workspace call for one."""
        repository = ctx.workspace and _is_git_repository(ctx.workspace)
        if mode == "worktree" and not repository:
            where = ctx.workspace or "(this task has no workspace)"
            raise ToolError(f"workspace 'worktree' needs a git repository; {where} is not one")
        if mode == "folder" or not repository:
            return ""
        target = child_workspace(ctx, ctx.subtask_id)
        if _exists(target):
            raise ToolError(f"the subagent's worktree path {target} exists already")
        branch = subtasks.branch_name(ctx.subtask_id)
        await _git(ctx.workspace, "worktree", "add", "-q", "-b", branch, target, "HEAD")
        return target

    async def remove_workspace(self, child_id: str, ctx: ToolContext, *, keep_work: bool) -> None:
        target = child_workspace(ctx, child_id)
        if not ctx.workspace or not _is_worktree(target):
            return  # no worktree (a folder is the child's own; nothing made, or gone)
        if keep_work and await _git(target, "status", "--porcelain"):
            await _git(target, "add", "-A")
            message = f"noeta: what subagent {child_id} left uncommitted"
            await _git(target, "-c", "user.name=noeta", "-c", "user.email=noeta@localhost",
                       "commit", "-q", "--no-verify", "-m", message)  # fmt: skip
        # Run from the worktree itself: the launching task's own worktree may be gone (a
        # nested child that outlived its cancelled parent).
        await _git(target, "worktree", "remove", "--force", target)
        if not keep_work:
            await _git(ctx.workspace, "branch", "-q", "-D", subtasks.branch_name(child_id))


def child_workspace(ctx: ToolContext, child_id: str) -> str:
    """The child's workspace: beside its parent's, as the runner's `workspace_for` names it."""
    return os.path.join(os.path.dirname(ctx.workspace), workspace_folder(child_id))


def _is_git_repository(folder: str) -> bool:
    return (Path(folder) / ".git").exists()


def _is_worktree(folder: str) -> bool:
    """A linked worktree has a `.git` file (a repository's own is a folder)."""
    return (Path(folder) / ".git").is_file()


def _exists(path: str) -> bool:
    return os.path.lexists(path)


async def _git(cwd: str, *arguments: str) -> str:
    """Run git in `cwd`; its output, or a ToolError with what git said."""
    environment = {"PATH": os.environ.get("PATH", ""), "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    process = await asyncio.create_subprocess_exec(
        "git", "-C", cwd, *arguments,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=environment,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ToolError(f"git {arguments[0]} took over {GIT_TIMEOUT_SECONDS:g} s") from None
    if process.returncode != 0:
        said = err.decode("utf-8", "replace").strip().splitlines()
        raise ToolError(f"git {arguments[0]} failed: {said[-1] if said else process.returncode}")
    return out.decode("utf-8", "replace")

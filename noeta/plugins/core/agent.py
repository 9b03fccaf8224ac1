"""The Agent tool: launch a subagent (a subtask) and get its final report as the result.

The runner creates the child in one append with the call's wait (`noeta.core.runner.
children`); this tool checks the input and prepares the child's workspace: a git worktree
on branch `noeta/<child id>` when the task's workspace is a git repository, else a folder
of its own. `recover` removes a worktree that a launch cut short left behind.
"""

from __future__ import annotations

import asyncio
import os

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import SubtaskRequest, ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.core.rules import subtasks
from noeta.core.rules.task_id import workspace_folder
from noeta.plugins.core import worktrees
from noeta.plugins.core.confinement import Confinement
from noeta.plugins.core.worktrees import Worktrees

WORKSPACE_MODES = ("auto", "worktree", "folder")


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

    def __init__(self, confinement: Confinement | None = None) -> None:
        # The git the worker runs for a task runs confined as the task's commands are.
        self.worktrees = Worktrees(confinement)

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
        repository = None
        if ctx.workspace:
            repository = await asyncio.to_thread(worktrees.repository, ctx.workspace)
        if mode == "worktree" and not repository:
            where = ctx.workspace or "(this task has no workspace)"
            raise ToolError(f"workspace 'worktree' needs a git repository; {where} is not one")
        if mode == "folder" or not repository:
            return ""
        target = child_workspace(ctx, ctx.subtask_id)
        await self.worktrees.add(ctx.workspace, target, subtasks.branch_name(ctx.subtask_id))
        return target

    async def remove_workspace(self, child_id: str, ctx: ToolContext, *, keep_work: bool) -> None:
        if not ctx.workspace:
            return
        target = child_workspace(ctx, child_id)
        branch = subtasks.branch_name(child_id)
        await self.worktrees.remove(ctx.workspace, target, branch, keep_work=keep_work)


def child_workspace(ctx: ToolContext, child_id: str) -> str:
    """The child's workspace: beside its parent's, as the runner's `workspace_for` names it."""
    return os.path.join(os.path.dirname(ctx.workspace), workspace_folder(child_id))

"""A fork's `--workspace copy` (ADR-0096): before the fork's first step, its worker makes
the fork's workspace a copy of the source's, once; a copy it cannot make fails the fork."""

from __future__ import annotations

import logging
from collections.abc import Callable

from noeta.core.ports.workspace_copy import WorkspaceCopier, WorkspaceNotCopied
from noeta.core.rules.next_action import FinishTask
from noeta.core.runner.writing import RunWriter

log = logging.getLogger(__name__)


def branch_name(task_id: str) -> str:
    """The git branch a forked git workspace is on."""
    return f"fork/{task_id}"


async def copy_if_asked(
    run: RunWriter, copier: WorkspaceCopier | None, workspace_for: Callable[[str], str]
) -> bool:
    """Copy the source's workspace into the fork's if its creation asks for one and no
    copy was made yet (the copier keeps that); True if the fork failed instead."""
    config = run.state.config
    if config is None or not config.workspace_from or run.state.finished:
        return False
    target = workspace_for(run.task_id)
    if not target:
        return False  # a worker without workspaces gives its tasks no files at all
    try:
        if copier is None:
            raise WorkspaceNotCopied("this worker cannot copy workspaces")
        await copier.copy(workspace_for(config.workspace_from), target, branch_name(run.task_id))
    except WorkspaceNotCopied as error:
        reason = f"workspace_not_copied: task {config.workspace_from}'s workspace: {error}"
        log.warning("task %s: %s", run.task_id, reason)
        await run.settle([], FinishTask("failed", error=reason))
        return True
    return False

"""The workspace-copy port: how a worker makes a fork's workspace a copy of its source's
(`--workspace copy`, ADR-0096). The plugin that implements it treats the source as hostile."""

from __future__ import annotations

from typing import Protocol

from noeta.core.errors import NoetaError


class WorkspaceNotCopied(NoetaError):
    """The source's workspace cannot be copied (missing here, too large, git failed);
    the message says why, and the fork fails with it."""


class WorkspaceCopier(Protocol):
    async def copy(self, source: str, target: str, branch: str) -> None:
        """Make `target` (a fork's workspace, under the same root as `source`) a copy of
        workspace `source` as it is now, once: a second call after one that succeeded
        changes nothing. A git workspace becomes a worktree of the same repository on
        a new `branch`. Raises WorkspaceNotCopied."""
        ...

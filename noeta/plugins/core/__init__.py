"""The core plugin: the built-in tools every task can be given (files, search, shell, web,
subagents).

`plugin(params)` is what the plugin registry calls; the parameters are pinned with the task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from noeta.core.ports.model import ToolSpec
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool
from noeta.core.ports.workspace_copy import WorkspaceCopier
from noeta.plugins.core.agent import Agent
from noeta.plugins.core.bash import (
    DEFAULT_OUTPUT_CAP_CHARS,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    Bash,
)
from noeta.plugins.core.confinement import Confinement, parse_confinement
from noeta.plugins.core.files import Edit, Read, Write
from noeta.plugins.core.search import Glob, Grep
from noeta.plugins.core.todo import TodoWrite
from noeta.plugins.core.toolsearch import ToolSearch
from noeta.plugins.core.wakeup import ScheduleWakeup
from noeta.plugins.core.web import WebFetch
from noeta.plugins.core.web_access import FetchPolicy
from noeta.plugins.core.workspace_copy import WorkspaceCopies
from noeta.plugins.core.worktrees import Worktrees
from noeta.plugins.tool_environment import passed_names

__all__ = [
    "Agent",
    "Bash",
    "CorePlugin",
    "Edit",
    "Glob",
    "Grep",
    "Read",
    "ScheduleWakeup",
    "TodoWrite",
    "ToolSearch",
    "WebFetch",
    "Write",
    "plugin",
]

PARAMETERS = (
    "bash_timeout_seconds",
    "output_cap_chars",
    "pass_env",
    "fetch_allow",
    "confine",
    "confine_read",
    "confine_write",
    "network",
    "limits",
)
MIN_OUTPUT_CAP_CHARS = 1_000  # below this even an error message would be cut


class CorePlugin:
    name = "core"

    def __init__(
        self,
        bash_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        output_cap_chars: int = DEFAULT_OUTPUT_CAP_CHARS,
        deferred: Sequence[ToolSpec] = (),
        pass_env: Sequence[str] = (),
        fetch_allow: Sequence[str] = (),
        confinement: Confinement | None = None,
    ) -> None:
        # output_cap_chars caps what comes from outside the workspace: Bash and WebFetch.
        self._tools: tuple[Tool, ...] = (
            Read(),
            Write(),
            Edit(),
            Glob(),
            Grep(),
            Bash(bash_timeout_seconds, output_cap_chars, pass_env, confinement),
            WebFetch(output_cap_chars=output_cap_chars, fetch_allow=fetch_allow),
            TodoWrite(),
            ScheduleWakeup(),
            ToolSearch(deferred),
            Agent(confinement),
        )
        self._copies = WorkspaceCopies(Worktrees(confinement))

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def workspace_copier(self) -> WorkspaceCopier:
        """How a worker copies a fork's workspace (`--workspace copy`, ADR-0096)."""
        return self._copies


def plugin(params: dict[str, JSONValue]) -> CorePlugin:
    """The core plugin with these parameters; a mistake is a ValueError naming it."""
    unknown = sorted(set(params) - set(PARAMETERS))
    if unknown:
        raise ValueError(
            f"core plugin: unknown parameter {', '.join(map(repr, unknown))}; "
            f"it accepts {', '.join(PARAMETERS)}"
        )
    timeout = params.get("bash_timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout <= MAX_TIMEOUT_SECONDS
    ):
        raise ValueError(
            "core plugin: bash_timeout_seconds must be a number above 0 and at most "
            f"{MAX_TIMEOUT_SECONDS:g}, not {timeout!r}"
        )
    cap = params.get("output_cap_chars", DEFAULT_OUTPUT_CAP_CHARS)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < MIN_OUTPUT_CAP_CHARS:
        raise ValueError(
            f"core plugin: output_cap_chars must be an integer of at least "
            f"{MIN_OUTPUT_CAP_CHARS:,}, not {cap!r}"
        )
    pass_env = passed_names("core plugin", params.get("pass_env"))
    fetch_allow = params.get("fetch_allow") or []
    if not isinstance(fetch_allow, list) or not all(isinstance(e, str) for e in fetch_allow):
        raise ValueError("core plugin: fetch_allow must be a list of hosts or networks")
    FetchPolicy.parse(cast(list[str], fetch_allow))  # a bad entry fails at start-up, named
    return CorePlugin(
        bash_timeout_seconds=float(timeout),
        output_cap_chars=cap,
        pass_env=pass_env,
        fetch_allow=cast(list[str], fetch_allow),
        confinement=parse_confinement(dict(params)),  # its `fetch_allow` is checked above
    )

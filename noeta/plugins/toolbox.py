"""What a process runs tasks with: the configured plugins, started, their tools, gates, pins."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from noeta.config import Config
from noeta.core.errors import ConfigError
from noeta.core.ports.pin import Pin
from noeta.core.ports.tool import Tool
from noeta.plugins.core.confinement import check_tools_at_start
from noeta.plugins.loading import LoadedPlugin, load, pins_of

if TYPE_CHECKING:  # only what runs tasks needs the runner; `noeta submit` lists tool names
    from noeta.core.ports.store import Store
    from noeta.core.ports.workspace_copy import WorkspaceCopier
    from noeta.core.rules.gates import Gate, GateRule
    from noeta.core.runner.model_call import Providers
    from noeta.core.runner.task import TaskRunner


@dataclass
class Toolbox:
    plugins: list[LoadedPlugin] = field(default_factory=list)
    tools: Mapping[str, Tool] = field(default_factory=dict)
    gates: tuple[Gate, ...] = ()
    workspaces: str = ""
    subagent_models: tuple[str, ...] = ()

    @property
    def pins(self) -> tuple[Pin, ...]:
        return pins_of(self.plugins)

    def runner(self, store: Store, providers: Providers) -> TaskRunner:
        """A runner with these tools, gates, workspaces and pins."""
        from noeta.core.runner.task import TaskRunner

        return TaskRunner(
            store,
            providers,
            self.tools,
            workspaces=self.workspaces,
            gates=self.gates,
            pins=self.pins,
            plugins=[loaded.plugin for loaded in self.plugins],
            subagent_models=self.subagent_models,
            workspace_copier=self.workspace_copier,
        )

    @property
    def workspace_copier(self) -> WorkspaceCopier | None:
        """The first plugin's that offers one (the core plugin); None: forks with a copied
        workspace fail on this worker, saying so."""
        for loaded in self.plugins:
            offered = getattr(loaded.plugin, "workspace_copier", None)
            if offered is not None:
                copier: WorkspaceCopier = offered()
                return copier
        return None

    @classmethod
    async def open(cls, config: Config, runs_tools: bool = False) -> Toolbox:
        """Load and start every plugin; ConfigError naming the one that fails, and why.

        `runs_tools`: this process will run the tools (a worker, `noeta run`), so what
        they need of the machine is checked and announced now (Bash's confinement).
        """
        box = cls(
            gates=config.gates,
            workspaces=config.workspaces,
            subagent_models=config.subagent_models,
        )
        try:
            for spec in config.plugins:
                loaded = load(spec)
                start = getattr(loaded.plugin, "start", None)
                if start is not None:
                    result = start()
                    if inspect.isawaitable(result):
                        await result
                box.plugins.append(loaded)
            tools: dict[str, Tool] = {}
            for loaded in box.plugins:
                for tool in loaded.plugin.tools():
                    if tool.name in tools:
                        raise ConfigError(
                            f"two plugins offer a tool named {tool.name!r} "
                            f"(the second is {loaded.pin.source})"
                        )
                    tools[tool.name] = tool
            box.tools = tools
            _check_gates(config.gates, tools)
            if runs_tools:
                check_tools_at_start(tools.values())
        except BaseException:
            await box.close()
            raise
        return box

    async def close(self) -> None:
        for loaded in reversed(self.plugins):
            close = getattr(loaded.plugin, "close", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result
        self.plugins.clear()


def _check_gates(gates: tuple[GateRule, ...], tools: Mapping[str, Tool]) -> None:
    """Fail closed: a configured gate that could never fire stops the process at start-up."""
    if not gates:
        return
    # getattr: a plugin's tool without a schema simply has no fields a gate could name.
    schemas = {name: getattr(tool, "input_schema", None) or {} for name, tool in tools.items()}
    for gate in gates:
        if (why := gate.unmatched(schemas)) is not None:
            raise ConfigError(f"{gate.source or 'config'}: gate: {why}")

"""The deployment's noeta config file: plugins, gates and where task workspaces live.

workspaces: /var/lib/noeta-workspaces   # each task's files: <workspaces>/<task id>
plugins:                                # default: just the built-in tools (core)
  - core
  - module: noeta.plugins.mcp
    params: {servers: {files: {command: mcp-files}}}
  - entry_point: acme-tools             # group "noeta.plugins"
gates:
  - {tool: Bash, field: command, pattern: 'rm\\s+-rf', action: deny, reason: no rm -rf}
  - {tool: Write, field: file_path, outside_workspace: true, action: ask}
subagent_models:                        # what an Agent call may name besides its own model
  - anthropic:claude-haiku-4-5          # an exact spec
  - openai:*                            # every spec that starts so (scripted: only if named)
store_session: postgresql://noeta@db:5432/noeta  # PostgreSQL's own URL when NOETA_STORE is
                                        # a pooler's (ADR-0106); NOETA_STORE_SESSION wins
prices:                                 # USD per million tokens, over the bundled table
  anthropic:claude-sonnet-4-5: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noeta.core.errors import ConfigError
from noeta.core.rules.prices import BUNDLED, Price, price_table
from noeta.plugins.loading import PluginSpec

if TYPE_CHECKING:  # built only from a config file that has gates
    from noeta.core.rules.gates import GateRule

CONFIG_ENV = "NOETA_CONFIG"
_GATE_KEYS = {"tool", "field", "pattern", "outside_workspace", "action", "reason", "set"}
_ACTIONS = ("allow", "deny", "ask", "rewrite")
_KEYS = ("gates", "plugins", "prices", "store_session", "subagent_models", "workspaces")


def default_workspaces() -> str:
    """`<home>-workspaces` beside the noeta home, never inside it: the home holds the
    embedded server's data and password, which no task's files may sit next to."""
    from noeta.backends.stores.embedded_home import default_home

    home = default_home().absolute()
    if not home.name:
        raise ConfigError(f"NOETA_HOME {str(home)!r} has no folder name; name a folder")
    return str(home.with_name(f"{home.name}-workspaces"))


@dataclass(frozen=True)
class Config:
    plugins: tuple[PluginSpec, ...] = (PluginSpec("module", "noeta.plugins.core"),)
    gates: tuple[GateRule, ...] = ()
    workspaces: str = field(default_factory=default_workspaces)
    # The models an Agent call may name besides its task's own (ADR-0076); none by default.
    subagent_models: tuple[str, ...] = ()
    # PostgreSQL's own URL for LISTEN and session locks beside a pooler's (ADR-0106).
    store_session: str | None = None
    # What tokens cost, per model spec: the bundled table with `prices:` laid over it.
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(BUNDLED))


def load_config(path: str | None) -> Config:
    """The config at `path` (or $NOETA_CONFIG); the defaults when neither is given."""
    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        return Config()
    from noeta import yamlfile  # YAML is imported only when there is a file to read

    document = yamlfile.load(path, what="noeta config")
    if document is None:
        return Config()
    if not isinstance(document, dict):
        raise ConfigError(f"{path}, line 1: the config is a mapping (plugins:, gates:, …)")
    unknown = sorted(set(document) - set(_KEYS))
    if unknown:
        line = yamlfile.line_of(document, unknown[0])
        raise ConfigError(
            f"{path}, line {line}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})"
        )
    plugin_items = _list(path, document, "plugins") or ["core"]
    gate_items = _list(path, document, "gates")
    plugins = tuple(
        _plugin(path, item, yamlfile.line_of(plugin_items, index))
        for index, item in enumerate(plugin_items)
    )
    gates = tuple(
        _gate(path, item, yamlfile.line_of(gate_items, index))
        for index, item in enumerate(gate_items)
    )
    workspaces = document.get("workspaces") or default_workspaces()
    if not isinstance(workspaces, str):
        line = yamlfile.line_of(document, "workspaces")
        raise ConfigError(f"{path}, line {line}: workspaces must be a folder's path")
    model_items = _list(path, document, "subagent_models")
    models = tuple(
        _model(path, item, yamlfile.line_of(model_items, index))
        for index, item in enumerate(model_items)
    )
    store_session = document.get("store_session")
    if store_session is not None and not isinstance(store_session, str):
        line = yamlfile.line_of(document, "store_session")
        raise ConfigError(f"{path}, line {line}: store_session must be a postgresql:// URL")
    prices = price_table(
        document.get("prices"), f"{path}, line {yamlfile.line_of(document, 'prices')}: prices"
    )
    return Config(plugins, gates, str(Path(workspaces).expanduser()), models, store_session, prices)


def _list(path: str, document: dict[str, Any], key: str) -> list[Any]:
    from noeta import yamlfile

    value = document.get(key) or []
    if not isinstance(value, list):
        line = yamlfile.line_of(document, key)
        raise ConfigError(f"{path}, line {line}: {key} must be a list (one `- ` item each)")
    return value


def _model(path: str, item: Any, line: int) -> str:
    """A model spec, or one ending in `*` for every spec that starts so."""
    from noeta.backends.models.registry import KNOWN

    prefix, colon, name = str(item).partition(":")
    if not isinstance(item, str) or not colon or not name or prefix not in KNOWN:
        raise ConfigError(
            f"{path}, line {line}: subagent_models: {item!r} is not a model spec "
            "(anthropic:MODEL, openai:MODEL, scripted:FILE; a trailing * for every spec "
            "that starts so: openai:*)"
        )
    return item


def _plugin(path: str, item: Any, line: int) -> PluginSpec:
    from noeta import yamlfile

    if isinstance(item, str):  # a built-in plugin by name
        return PluginSpec("module", f"noeta.plugins.{item}")
    if not isinstance(item, dict) or len({"module", "entry_point"} & set(item)) != 1:
        raise ConfigError(f"{path}, line {line}: a plugin is a name, or module: / entry_point:")
    params = item.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{path}, line {line}: plugin params must be a mapping")
    if "module" in item:
        return PluginSpec("module", str(item["module"]), yamlfile.plain(params))
    return PluginSpec("entry_point", str(item["entry_point"]), yamlfile.plain(params))


def _gate(path: str, item: Any, line: int) -> GateRule:
    from noeta import yamlfile
    from noeta.core.rules.gates import GateRule

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{path}, line {line}: gate: {message}")

    if not isinstance(item, dict):
        raise fail("each gate is a mapping with at least `action:`")
    unknown = sorted(set(item) - _GATE_KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_GATE_KEYS))})")
    if item.get("action") not in _ACTIONS:
        raise fail(f"action must be one of {', '.join(_ACTIONS)}")
    if (item.get("pattern") or item.get("outside_workspace")) and not item.get("field"):
        raise fail("pattern and outside_workspace need a field")
    try:
        return GateRule(
            action=item["action"],
            tool=str(item.get("tool", "*")),
            field_name=str(item.get("field", "")),
            pattern=str(item.get("pattern", "")),
            outside_workspace=bool(item.get("outside_workspace", False)),
            reason=str(item.get("reason", "")),
            set=yamlfile.plain(item.get("set") or {}),
            source=f"{path}, line {line}",
        )
    except re.error as error:
        raise fail(f"pattern is not a regular expression: {error}") from None

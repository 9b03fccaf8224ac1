"""Loading the plugins a deployment lists, by module path or entry point, and pinning them.

A plugin module exposes `plugin(params) -> Plugin`, or functions decorated `@noeta.tool`
(then the module, named after itself, is the plugin). Its pin is its name, where it came
from, the version of the package that ships it (or the hash of its file, for a module
outside any package), and a hash of its parameters.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from noeta.core.errors import ConfigError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.plugin import Pin, Plugin, params_hash
from noeta.plugins.function_tools import FunctionsPlugin, tools_in

ENTRY_POINT_GROUP = "noeta.plugins"


@dataclass(frozen=True)
class PluginSpec:
    kind: Literal["module", "entry_point"]
    name: str  # a module path, or an entry point's name
    params: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedPlugin:
    plugin: Plugin
    pin: Pin


def load(spec: PluginSpec) -> LoadedPlugin:
    """Import and build one plugin; ConfigError naming it and why if that fails."""
    source = f"{spec.kind}:{spec.name}"
    try:
        module = _import(spec)
    except Exception as error:
        raise ConfigError(
            f"plugin {source} cannot be loaded: {type(error).__name__}: {error}"
        ) from None
    factory = getattr(module, "plugin", None)
    functions = tools_in(module)
    if not callable(factory) and not functions:
        raise ConfigError(f"plugin {source} has no plugin(params) function nor @noeta.tool")
    try:
        plugin: Plugin = (
            factory(dict(spec.params))
            if callable(factory)
            else FunctionsPlugin(module.__name__, functions)
        )
    except (ValueError, TypeError) as error:
        raise ConfigError(f"plugin {source}: bad parameters: {error}") from None
    pin = Pin(plugin.name, source, _version(module), params_hash(dict(spec.params)))
    return LoadedPlugin(plugin, pin)


@functools.cache
def module_pin(module_name: str) -> Pin:
    """The pin a worker gives a module of decorated functions listed without parameters:
    what a job is created with, so a worker lacking the module never runs it (ADR-023).
    Read once per process: package metadata is slow to read, and the imported code cannot
    change under it."""
    module = importlib.import_module(module_name)
    return Pin(module_name, f"module:{module_name}", _version(module), params_hash({}))


def pins_of(plugins: list[LoadedPlugin]) -> tuple[Pin, ...]:
    return tuple(p.pin for p in sorted(plugins, key=lambda loaded: loaded.pin.name))


def _import(spec: PluginSpec) -> ModuleType:
    if spec.kind == "module":
        return importlib.import_module(spec.name)
    from importlib import metadata  # slow to import: only for a plugin named by entry point

    points = metadata.entry_points(group=ENTRY_POINT_GROUP, name=spec.name)
    if not points:
        raise LookupError(f"no entry point {spec.name!r} in group {ENTRY_POINT_GROUP}")
    loaded: Any = next(iter(points)).load()
    return loaded if isinstance(loaded, ModuleType) else importlib.import_module(loaded.__module__)


def _version(module: ModuleType) -> str:
    """The version of the package that ships the module, else the hash of its file."""
    from importlib import metadata  # slow to import, and only a plugin's pin needs it

    top = module.__name__.split(".")[0]
    if top == "noeta":  # the built-in plugins: the scan below takes ~100 ms, for this answer
        return metadata.version("noeta")
    # Editable installs are often missing from packages_distributions(); most packages
    # are named like their top-level module, so try that too.
    for distribution in [*metadata.packages_distributions().get(top, []), top]:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    path = getattr(module, "__file__", None)
    if path is None:
        return "unknown"
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]

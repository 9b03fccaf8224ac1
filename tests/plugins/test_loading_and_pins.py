"""Plugins by module path, their pins in the log, and a worker that lacks a pinned plugin."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.config import load_config
from noeta.core.errors import ConfigError
from noeta.core.ports.store import Store
from noeta.core.runner.task import TaskRunner
from noeta.core.task import LOAD_ATTEMPTS
from noeta.plugins.loading import PluginSpec, load, pins_of
from tests.core.runner.test_runner import create, script

PLUGIN = """
from dataclasses import dataclass, field

@dataclass
class Greeter:
    name: str = "greeter"
    greeting: str = "hi"

    def tools(self):
        return []

def plugin(params):
    unknown = set(params) - {"greeting"}
    if unknown:
        raise ValueError(f"unknown parameter {sorted(unknown)[0]!r}")
    return Greeter(greeting=params.get("greeting", "hi"))
"""


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "greeter_plugin.py").write_text(PLUGIN)
    (folder / "broken_plugin.py").write_text("import no_such_module_anywhere\n")
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    for name in ("greeter_plugin", "broken_plugin"):
        sys.modules.pop(name, None)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def test_a_pin_names_source_version_and_parameters(plugin_dir: Path) -> None:
    loaded = load(PluginSpec("module", "greeter_plugin", {"greeting": "hello"}))
    assert loaded.pin.name == "greeter" and loaded.pin.source == "module:greeter_plugin"
    assert loaded.pin.version.startswith("sha256:")  # a file outside any package
    other = load(PluginSpec("module", "greeter_plugin", {"greeting": "hey"}))
    assert other.pin.params_hash != loaded.pin.params_hash
    core = load(PluginSpec("module", "noeta.plugins.core"))
    assert core.pin.version == "0.1.0.dev0"  # the package that ships it


def test_a_plugin_that_fails_to_import_is_named_with_the_reason(plugin_dir: Path) -> None:
    with pytest.raises(
        ConfigError, match="plugin module:broken_plugin cannot be loaded: ModuleNotFoundError"
    ):
        load(PluginSpec("module", "broken_plugin"))
    with pytest.raises(ConfigError, match="bad parameters: unknown parameter 'volume'"):
        load(PluginSpec("module", "greeter_plugin", {"volume": 11}))
    with pytest.raises(ConfigError, match="no entry point 'nope'"):
        load(PluginSpec("entry_point", "nope"))


async def test_pins_are_logged_at_first_start_and_again_when_they_change(
    store: Store, tmp_path: Path, plugin_dir: Path
) -> None:
    await create(store, "t", script(tmp_path, {"text": "a"}, {"text": "b"}), interactive=True)
    first = pins_of([load(PluginSpec("module", "greeter_plugin"))])
    runner = TaskRunner(store, ProviderRegistry(), pins=first)
    claim = await store.claim_task("w", "t", 60)
    assert claim is not None
    await runner.run(claim)
    changed = pins_of([load(PluginSpec("module", "greeter_plugin", {"greeting": "yo"}))])
    claim = await store.claim_task("w", "t", 60)
    assert claim is None  # waiting for a message; give it one
    from noeta.core.ports.store import Delivery

    await store.deliver(Delivery("t", {"text": "hi"}))
    claim = await store.claim_task("w", "t", 60)
    assert claim is not None
    await TaskRunner(store, ProviderRegistry(), pins=changed).run(claim)
    pinned = [e.data["pins"] for e in await store.read_log("t") if e.type == "PluginsPinned"]  # type: ignore[index]
    assert pinned == [[list(p.as_tuple()) for p in first], [list(p.as_tuple()) for p in changed]]


async def test_a_worker_lacking_a_pinned_plugin_writes_nothing_then_fails_the_task(
    store: Store, tmp_path: Path, plugin_dir: Path
) -> None:
    await create(store, "t", script(tmp_path, {"text": "a"}), prompt="go")
    pins = pins_of([load(PluginSpec("module", "greeter_plugin"))])
    claim = await store.claim_task("w", "t", 60)
    assert claim is not None
    from noeta.core.ports.store import NewEvent
    from noeta.core.rules import events

    await store.append(claim, 1, [NewEvent(*events.encode(events.PluginsPinned(pins)))])
    await store.release(claim)
    lacking = TaskRunner(store, ProviderRegistry(), pins=())
    outcomes = []
    for _ in range(LOAD_ATTEMPTS):
        claim = await store.claim_task("w", "t", 60)
        assert claim is not None
        result = await lacking.run(claim)
        outcomes.append(result.outcome)
        if result.outcome == "plugin_missing":
            assert len(await store.read_log("t")) == 2  # nothing written
            await store.release(claim)
    assert outcomes == ["plugin_missing"] * (LOAD_ATTEMPTS - 1) + ["finished"]
    last = (await store.read_log("t"))[-1]
    assert last.type == "TaskFinished"
    assert "plugin_missing: this worker lacks greeter (module:greeter_plugin" in last.data["error"]  # type: ignore[index]


def test_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(
        textwrap.dedent("""\
        workspaces: ~/ws
        plugins:
          - core
          - module: noeta.plugins.mcp
            params: {servers: {}}
        gates:
          - {tool: Bash, field: command, pattern: 'rm\\s+-rf', action: deny, reason: no}
    """)
    )
    loaded = load_config(str(config))
    assert [p.name for p in loaded.plugins] == ["noeta.plugins.core", "noeta.plugins.mcp"]
    assert loaded.gates[0].action == "deny" and loaded.workspaces.endswith("/ws")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gates:\n  - {action: maybe}\n", "line 2: gate: action must be one of"),
        (
            "gates:\n  - {action: deny, field: x, pattern: '(oops'}\n",
            "line 2: gate: pattern is not",
        ),
        ("gates:\n  - {action: deny, colour: red}\n", "line 2: gate: unknown key 'colour'"),
        ("plugins:\n  - {module: a, entry_point: b}\n", "line 2: a plugin is a name"),
        ("plugns: []\n", "line 1: unknown key 'plugns'"),
        ("gates: [\n", "line 2, column 1: not valid YAML"),
    ],
)
def test_config_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(str(config))

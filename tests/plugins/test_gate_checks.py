"""Gates fail closed at start-up: one that could never fire stops worker and run.

A gate naming a tool that is not loaded or a field the tool does not have would silently
never match; the deployment learns at start-up, in one line naming the file and the gate.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from noeta.config import load_config
from noeta.core.errors import ConfigError
from noeta.plugins.toolbox import Toolbox
from tests.cli.test_run import noeta, noeta_process, one_line_error

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "hello.yaml"

BAD_GATES = [
    (
        "{tool: Write, field: path, outside_workspace: true, action: ask}",
        "gate: tool 'Write' has no input field 'path' (its fields: content, file_path)",
    ),
    ("{tool: Wirte, action: deny}", "gate: no loaded tool is named 'Wirte' (loaded: Agent, Bash, "),
    ("{tool: 'mcp__*', action: deny}", "gate: no loaded tool matches 'mcp__*'"),
    (
        "{tool: '*', field: nope, pattern: x, action: deny}",
        "gate: no tool matched by '*' has an input field 'nope'",
    ),
    ("{tool: Bash, field: command, pattern: '(', action: deny}", "gate: pattern is not a regular"),
    ("{tool: Bash, action: block}", "gate: action must be one of allow, deny, ask, rewrite"),
]


@pytest.mark.parametrize(("gate", "expected"), BAD_GATES, ids=[g for g, _ in BAD_GATES])
async def test_a_gate_that_cannot_fire_stops_the_toolbox(
    tmp_path: Path, gate: str, expected: str
) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(f"gates:\n  - {{tool: Bash, action: allow}}\n  - {gate}\n")
    with pytest.raises(ConfigError) as raised:
        await Toolbox.open(load_config(str(config)))
    assert str(raised.value).startswith(f"{config}, line 3: {expected}"), raised.value


# `noeta submit` loads no plugin (ADR-0088), so it checks no gate: the worker does.
@pytest.mark.parametrize("command", ["run", "worker"])
def test_worker_and_run_stop_with_one_line(tmp_path: Path, command: str) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(
        "gates:\n  - {tool: Write, field: path, outside_workspace: true, action: ask}\n"
    )
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    arguments = {
        "run": ["run", "hi", "--model", f"scripted:{EXAMPLE}"],
        "worker": ["worker"],
    }[command]
    # A worker installs its signal handlers, which only a process's main thread may.
    run = noeta_process if command == "worker" else noeta
    result = run(*arguments, "--config", str(config), store=store)
    line = one_line_error(result)
    assert line == (
        f"noeta: error: {config}, line 2: gate: tool 'Write' has no input field 'path' "
        "(its fields: content, file_path)"
    )


def documented_gates() -> list[tuple[str, object]]:
    """Every `gates:` example in the docs (YAML blocks and the config module's docstring)."""
    found: list[tuple[str, object]] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "SECURITY.md"]:
        if not path.exists():
            continue
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S):
            document = yaml.safe_load(block)
            if isinstance(document, dict) and "gates" in document:
                found.append((path.name, document["gates"]))
    docstring = (ROOT / "noeta" / "config.py").read_text().split('"""')[1]
    found.append(("noeta/config.py", yaml.safe_load(docstring.split("\n", 1)[1])["gates"]))
    return found


@pytest.mark.parametrize(("where", "gates"), documented_gates(), ids=lambda v: str(v)[:20])
async def test_the_documented_gates_load(tmp_path: Path, where: str, gates: object) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(yaml.safe_dump({"gates": gates}))
    toolbox = await Toolbox.open(load_config(str(config)))
    await toolbox.close()

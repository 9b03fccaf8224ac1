"""The core plugin: its tools, their declared flags and schemas, and its parameters."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from noeta.core.ports.payload import JSONValue, encode
from noeta.core.ports.plugin import Plugin
from noeta.plugins.core import Bash, CorePlugin, WebFetch, plugin

RETRY_SAFE = {"Read", "Glob", "Grep", "WebFetch", "TodoWrite", "ScheduleWakeup", "ToolSearch"}
NOT_RETRY_SAFE = {"Write", "Edit", "Bash", "Agent"}


def test_all_tools_with_their_flags() -> None:
    core: Plugin = plugin({})
    assert core.name == "core"
    flags = {tool.name: tool.flags.retry_safe for tool in core.tools()}
    assert flags == {name: True for name in RETRY_SAFE} | {name: False for name in NOT_RETRY_SAFE}


def test_every_schema_is_a_storable_object_schema() -> None:
    for tool in CorePlugin().tools():
        encode(tool.input_schema)
        Draft202012Validator.check_schema(tool.input_schema)  # what the runner validates with
        assert tool.input_schema["type"] == "object"
        properties = tool.input_schema["properties"]
        required = tool.input_schema["required"]
        assert isinstance(properties, dict)
        assert isinstance(required, list)
        assert set(map(str, required)) <= set(properties), tool.name
        assert tool.description


def test_parameters_reach_the_tools() -> None:
    tools = {
        tool.name: tool
        for tool in plugin({"bash_timeout_seconds": 5, "output_cap_chars": 2_000}).tools()
    }
    bash = tools["Bash"]
    assert isinstance(bash, Bash)
    assert (bash.timeout_seconds, bash.output_cap_chars) == (5.0, 2_000)
    web = tools["WebFetch"]
    assert isinstance(web, WebFetch)
    assert web.output_cap_chars == 2_000


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"bash_timeout": 5}, "unknown parameter 'bash_timeout'"),
        ({"bash_timeout_seconds": 601}, "at most 600"),
        ({"bash_timeout_seconds": 0}, "above 0"),
        ({"bash_timeout_seconds": True}, "must be a number"),
        ({"output_cap_chars": 10}, "at least 1,000"),
        ({"output_cap_chars": 5_000.5}, "must be an integer"),
    ],
)
def test_bad_parameters_are_refused(params: dict[str, JSONValue], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        plugin(params)


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        ("Read", {"file_path": "a", "offset": 2}, {"file_path": "a", "offset": 0}),
        ("Bash", {"command": "true", "timeout_seconds": 0.5}, {"command": "true", "timeout": 1}),
        ("Edit", {"file_path": "a", "old_string": "x", "new_string": "y"}, {"file_path": "a"}),
        (
            "TodoWrite",
            {"todos": [{"content": "a", "status": "pending"}]},
            {"todos": [{"content": "a", "status": "done"}]},
        ),
        ("ToolSearch", {"query": "x", "max_results": 3}, {"query": "x", "max_results": 51}),
        ("ScheduleWakeup", {"prompt": "p", "delay_seconds": 5}, {"prompt": "p", "delay": 5}),
    ],
)
def test_schemas_accept_and_refuse_what_the_tools_do(
    name: str, good: dict[str, JSONValue], bad: dict[str, JSONValue]
) -> None:
    tool = next(tool for tool in CorePlugin().tools() if tool.name == name)
    validator = Draft202012Validator(tool.input_schema)
    assert validator.is_valid(good)
    assert not validator.is_valid(bad)

"""Requests both adapters' tests encode, and what every provider error must satisfy."""

from __future__ import annotations

import socket

from noeta.core.ports.model import (
    Message,
    ModelRequest,
    ProviderError,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
)

API_KEY = "sk-test-7f3a9c21-do-not-leak"


def conversation() -> ModelRequest:
    """A system prompt, two tools, and a turn that called both and got their results."""
    return ModelRequest(
        model="test-model",
        system="You are terse. Café ✓",
        tools=(
            ToolSpec(
                "Bash",
                "Run a shell command.",
                {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            ),
            ToolSpec(
                "Read",
                "Read a file.",
                {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "limit": {"default": 0.1}},
                },
            ),
        ),
        messages=(
            Message("user", (Text("List the files, then read README.md."),)),
            Message(
                "assistant",
                (
                    Text("Looking."),
                    ToolCall("call-1", "Bash", {"command": "ls"}),
                    ToolCall("call-2", "Read", {"path": "README.md", "limit": 0.1}),
                ),
            ),
            Message(
                "user",
                (
                    ToolResult("call-1", "README.md\nsrc"),
                    ToolResult("call-2", "no such file", is_error=True),
                ),
            ),
        ),
        max_tokens=1024,
    )


def assert_keeps_key_secret(error: ProviderError) -> None:
    assert API_KEY not in str(error)
    assert API_KEY not in repr(error)
    assert API_KEY not in repr(error.args)


def unused_port() -> int:
    """A port nothing listens on (it was free a moment ago, which is enough here)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port

"""The Anthropic Messages API as a `Provider`, with prompt-cache breakpoints on the prefix
that stays the same from one turn to the next; every reply is streamed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import assert_never

from noeta.backends.models.anthropic_stream import MessageStream
from noeta.backends.models.usage import anthropic_usage
from noeta.backends.models.wire import (
    JsonEndpoint,
    MalformedReply,
    check_base_url,
    encode_json,
    member,
)
from noeta.core.errors import ConfigError
from noeta.core.ports.model import (
    Block,
    Message,
    ModelReply,
    ModelRequest,
    OnDelta,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"

# A breakpoint caches the whole prefix up to and including its block. The API allows 4.
_CACHE_BREAKPOINT = {"type": "ephemeral"}

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
}


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        timeout_seconds: float = 600.0,
    ) -> None:
        if not api_key:
            raise ConfigError("the Anthropic API key is empty")
        self.base_url = check_base_url(base_url)
        headers = {
            "x-api-key": api_key,
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
        }
        self._endpoint = JsonEndpoint(
            self.name,
            f"{self.base_url}/v1/messages",
            headers,
            timeout_seconds=timeout_seconds,
            secret=api_key,
        )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> AnthropicProvider:
        """Configured by ANTHROPIC_API_KEY and, optionally, ANTHROPIC_BASE_URL."""
        env = os.environ if environ is None else environ
        api_key = env.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise ConfigError("ANTHROPIC_API_KEY is not set")
        return cls(api_key, base_url=env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL)

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={self.base_url!r})"

    def encode_request(self, request: ModelRequest, *, stream: bool = True) -> bytes:
        body: dict[str, object] = {"model": request.model, "max_tokens": request.max_tokens}
        if request.system:
            body["system"] = [
                {"type": "text", "text": request.system, "cache_control": _CACHE_BREAKPOINT}
            ]
        if request.tools:
            tools: list[dict[str, object]] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                }
                for tool in request.tools
            ]
            tools[-1]["cache_control"] = _CACHE_BREAKPOINT
            body["tools"] = tools
        contents = [
            [_encode_block(block) for block in message.content] for message in request.messages
        ]
        for index in _message_breakpoints(request.messages):
            if contents[index]:
                contents[index][-1]["cache_control"] = _CACHE_BREAKPOINT
        body["messages"] = [
            {"role": message.role, "content": content}
            for message, content in zip(request.messages, contents, strict=True)
        ]
        if stream:  # last, as the only key the two forms differ by
            body["stream"] = True
        return encode_json(body)

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        return await self._endpoint.post(body, MessageStream, _parse_message, on_delta)

    async def close(self) -> None:
        await self._endpoint.close()


def _message_breakpoints(messages: Sequence[Message]) -> tuple[int, ...]:
    """The last message writes this turn's prefix to the cache. The user message before the
    latest reply was the previous request's last message: a breakpoint there reads what that
    request wrote, even when this turn added more blocks than the cache looks back over (20).
    """
    if not messages:
        return ()
    last = len(messages) - 1
    seen_reply = False
    for index in range(last, -1, -1):
        role = messages[index].role
        if role == "user" and seen_reply:
            return (index, last)
        seen_reply = seen_reply or role == "assistant"
    return (last,)


def _encode_block(block: Block) -> dict[str, object]:
    match block:
        case Text(text=text):
            return {"type": "text", "text": text}
        case ToolCall(id=call_id, name=name, input=arguments):
            return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        case ToolResult(call_id=call_id, content=content, is_error=is_error):
            encoded: dict[str, object] = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": content,
            }
            if is_error:
                encoded["is_error"] = True
            return encoded
        case _:
            assert_never(block)


def _parse_message(document: dict[str, object]) -> ModelReply:
    content: list[Text | ToolCall] = []
    for block in member(document, "content", list):
        if not isinstance(block, dict):
            raise MalformedReply("a content block is not an object")
        kind = block.get("type")
        if kind == "text":
            text = member(block, "text", str)
            if text.strip():  # "\n\n" before a tool call: never stored, as a re-send is refused
                content.append(Text(text))
        elif kind == "tool_use":
            content.append(
                ToolCall(
                    id=member(block, "id", str),
                    name=member(block, "name", str),
                    input=member(block, "input", dict),
                )
            )
        # Other kinds (thinking, server tools) answer only features noeta does not request.
    stop_reason = member(document, "stop_reason", str)
    response_id = document.get("id")
    return ModelReply(
        content=tuple(content),
        stop_reason=_STOP_REASONS.get(stop_reason, "other"),
        usage=anthropic_usage(document.get("usage")),
        provider_stop_reason=stop_reason,
        response_id=response_id if isinstance(response_id, str) else "",
    )

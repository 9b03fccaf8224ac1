"""The OpenAI Chat Completions API as a `Provider`; with a base URL it also drives the
servers that speak it (vLLM, Ollama, llama.cpp), which often need no key. Every reply is
streamed, with its usage.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence

import httpx

from noeta.backends.models.openai_stream import CompletionStream
from noeta.backends.models.usage import openai_usage
from noeta.backends.models.wire import (
    JsonEndpoint,
    MalformedReply,
    check_base_url,
    encode_json,
    member,
)
from noeta.core.errors import ConfigError
from noeta.core.ports.model import (
    Message,
    ModelReply,
    ModelRequest,
    OnDelta,
    ProviderError,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"

log = logging.getLogger(__name__)

_REASONING_MODEL = re.compile(r"(o\d|gpt-5)(\b|[-.])")

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",  # the pre-tools name, still sent by some servers
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIProvider:
    name = "openai"

    def __init__(
        self,
        api_key: str | None,
        *,
        base_url: str = DEFAULT_BASE_URL,
        timeout_seconds: float = 600.0,
    ) -> None:
        self.base_url = check_base_url(base_url)
        if not api_key and _needs_key(self.base_url):
            raise ConfigError(f"an API key is needed for {self.base_url}")
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._endpoint = JsonEndpoint(
            self.name,
            f"{self.base_url}/chat/completions",
            headers,
            timeout_seconds=timeout_seconds,
            secret=api_key or None,
        )
        self._refuses_stream_options = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> OpenAIProvider:
        """Configured by OPENAI_API_KEY and OPENAI_BASE_URL; a self-hosted server may go
        without a key."""
        env = os.environ if environ is None else environ
        api_key = env.get("OPENAI_API_KEY") or None
        base_url = env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        if api_key is None and _needs_key(base_url):
            raise ConfigError("OPENAI_API_KEY is not set")
        return cls(api_key, base_url=base_url)

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r})"

    def encode_request(self, request: ModelRequest, *, stream: bool = True) -> bytes:
        limit = "max_completion_tokens" if is_reasoning_model(request.model) else "max_tokens"
        body: dict[str, object] = {"model": request.model, limit: request.max_tokens}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    },
                }
                for tool in request.tools
            ]
        messages: list[dict[str, object]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        for message in request.messages:
            if message.role == "assistant":
                messages.append(_encode_assistant(message))
            else:
                messages.extend(_encode_user(message))
        body["messages"] = messages
        if stream and not self._refuses_stream_options:
            # Last: the streamed form is the whole one and these keys. The usage comes
            # in a last chunk, which only this option asks for.
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return encode_json(body)

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        try:
            return await self._post(body, on_delta)
        except ProviderError as error:
            whole = _whole_form(body)
            if whole is None or not _refuses_stream_options(error):
                raise
        # A server that knows no `stream_options` (older vLLM and proxies) refuses the
        # request (400). Without the option a stream has no usage, so the request is sent
        # whole instead, once: the usage stays exact, the reply comes at once. Once that
        # worked it is remembered: this provider's later requests are encoded whole, and
        # the request_sha256 recorded for them names the bytes sent (ADR-0111).
        reply = await self._post(whole, on_delta)
        if not self._refuses_stream_options:
            self._refuses_stream_options = True
            log.warning(
                "%s refuses stream_options: its model calls are sent whole from now on"
                " (their replies are not streamed)",
                self.base_url,
            )
        return reply

    async def _post(self, body: bytes, on_delta: OnDelta | None) -> ModelReply:
        return await self._endpoint.post(body, CompletionStream, _parse_completion, on_delta)

    async def close(self) -> None:
        await self._endpoint.close()


_STREAMED_SUFFIX = b',"stream":true,"stream_options":{"include_usage":true}}'


def _whole_form(body: bytes) -> bytes | None:
    """The body `encode_request(…, stream=False)` gives for the request `body` streams
    (the stream keys are its last); None if `body` is not a streamed request of ours."""
    if not body.endswith(_STREAMED_SUFFIX):
        return None
    return body[: -len(_STREAMED_SUFFIX)] + b"}"


def _refuses_stream_options(error: ProviderError) -> bool:
    # The servers word it differently ("Unrecognized request argument supplied:
    # stream_options", "extra fields not permitted"), but every one names the field.
    return error.status == 400 and "stream_options" in str(error)


def is_reasoning_model(model: str) -> bool:
    """OpenAI's reasoning models (o1, o3, o4-mini, gpt-5…) refuse `max_tokens` and take
    `max_completion_tokens`; other servers speaking this API may know only `max_tokens`."""
    return _REASONING_MODEL.match(model) is not None


def _needs_key(base_url: str) -> bool:
    host = httpx.URL(base_url).host
    return host == "openai.com" or host.endswith(".openai.com")


def _encode_user(message: Message) -> list[dict[str, object]]:
    """Tool results become `tool` messages, which must follow the assistant's calls at once;
    any text of the same message comes after them, as a user message."""
    encoded: list[dict[str, object]] = []
    texts: list[str] = []
    for block in message.content:
        if isinstance(block, ToolResult):
            # Chat Completions has no error flag on a tool result; the model reads it here.
            content = f"Error: {block.content}" if block.is_error else block.content
            encoded.append({"role": "tool", "tool_call_id": block.call_id, "content": content})
        elif isinstance(block, Text):
            texts.append(block.text)
        else:
            raise ValueError(f"a user message cannot hold a tool call ({block.id})")
    if texts or not encoded:
        encoded.append({"role": "user", "content": _text_content(texts)})
    return encoded


def _encode_assistant(message: Message) -> dict[str, object]:
    texts: list[str] = []
    calls: list[dict[str, object]] = []
    for block in message.content:
        if isinstance(block, ToolCall):
            # `arguments` is a JSON string: encoded like the body, so it is as deterministic.
            arguments = encode_json(block.input).decode("utf-8")
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif isinstance(block, Text):
            texts.append(block.text)
        else:
            raise ValueError(f"an assistant message cannot hold a tool result ({block.call_id})")
    encoded: dict[str, object] = {
        "role": "assistant",
        "content": _text_content(texts) if texts else None,
    }
    if calls:
        encoded["tool_calls"] = calls
    return encoded


def _text_content(texts: Sequence[str]) -> str | list[dict[str, object]]:
    # A plain string is what every compatible server accepts; parts keep blocks apart.
    if len(texts) <= 1:
        return texts[0] if texts else ""
    return [{"type": "text", "text": text} for text in texts]


def _parse_completion(document: dict[str, object]) -> ModelReply:
    choices = member(document, "choices", list)
    if not choices or not isinstance(choices[0], dict):
        raise MalformedReply("'choices' holds no choice")
    choice = choices[0]
    message = member(choice, "message", dict)
    content: list[Text | ToolCall] = []
    text = message.get("content")
    if text is not None and not isinstance(text, str):
        raise MalformedReply("'content' is not a string")
    if text and text.strip():  # a blank block is never stored: Anthropic refuses one re-sent
        content.append(Text(text))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append(Text(refusal))
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise MalformedReply("'tool_calls' is not a list")
    content.extend(_parse_tool_call(call) for call in calls)
    finish_reason = member(choice, "finish_reason", str)
    stop_reason = _STOP_REASONS.get(finish_reason, "other")
    if isinstance(refusal, str) and refusal:
        stop_reason = "refusal"
    elif calls and stop_reason == "end_turn":
        # OpenAI itself (with a named tool_choice) and some servers say "stop" here.
        stop_reason = "tool_use"
    response_id = document.get("id")
    return ModelReply(
        content=tuple(content),
        stop_reason=stop_reason,
        usage=openai_usage(document.get("usage")),
        provider_stop_reason=finish_reason,
        response_id=response_id if isinstance(response_id, str) else "",
    )


def _parse_tool_call(call: object) -> ToolCall:
    if not isinstance(call, dict):
        raise MalformedReply("a tool call is not an object")
    function = member(call, "function", dict)
    arguments = member(function, "arguments", str)
    try:
        # Some servers send "" for a tool that takes no arguments.
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise MalformedReply("the model returned tool arguments that are not valid JSON")
    return ToolCall(id=member(call, "id", str), name=member(function, "name", str), input=parsed)

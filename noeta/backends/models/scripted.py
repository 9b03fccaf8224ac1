"""`scripted:<file>`: a model that answers from a YAML script, for tests, demos and the cluster.

The script lists the model's replies in order; reply N answers the task's N-th model
call that got a reply (the request carries that count), so a task resumed on another
worker after a crash gets exactly the reply it would have got. Format:

    replies:
      - text: "Let me look."             # a reply; ends the turn unless it calls tools
        tool_calls:                      # optional: calls, run in this order
          - {id: call-1, name: Bash, input: {command: "ls"}}
      - text: "cut off"
        stop: max_tokens                 # end_turn | tool_use | max_tokens | refusal
      - empty: true                      # a reply with no content at all
      - text: "finally"
        fail_first:                      # this reply's first attempts fail first
          - {status: 529, retry_after: 0}
        usage: {input_tokens: 10, output_tokens: 2}
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

from noeta import yamlfile
from noeta.core.errors import ConfigError
from noeta.core.ports.model import (
    Message,
    ModelReply,
    ModelRequest,
    OnDelta,
    ProviderError,
    StopReason,
    Text,
    TextDelta,
    ToolCall,
    ToolInputDelta,
    ToolResult,
    Usage,
)

# Scripts are short (tests, demos); parsing a long one holds a thread for seconds.
MAX_SCRIPT_BYTES = 64 * 1024
_STOPS = ("end_turn", "tool_use", "max_tokens", "refusal", "other")
_REPLY_KEYS = {"text", "tool_calls", "stop", "empty", "fail_first", "usage"}
# A request's body: made once, not a JSONEncoder per call (`json.dumps` with options).
_REQUEST = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
# How that body begins: the reply it asks for is read there (`_reply_index`).
_REPLY_HEAD = b'{"reply":'


@dataclass(frozen=True)
class ScriptedFailure:
    status: int
    retry_after: float | None = None
    message: str = "scripted failure"


@dataclass(frozen=True)
class ScriptedReply:
    reply: ModelReply
    fail_first: tuple[ScriptedFailure, ...] = ()


@dataclass
class ScriptedProvider:
    """Answers from a script; `requests` keeps the last bodies it was sent, for tests."""

    path: str
    replies: tuple[ScriptedReply, ...]
    name: str = "scripted"
    # Bounded: a long-running worker keeps one provider per model spec for its whole life.
    requests: deque[bytes] = field(default_factory=lambda: deque(maxlen=100))
    _attempts: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: str, *, follow_links: bool = True) -> ScriptedProvider:
        return cls(path, load_script(path, follow_links=follow_links))

    def encode_request(self, request: ModelRequest, *, stream: bool = True) -> bytes:
        # One form: the script's replies are told as a stream when a hook listens.
        document = {
            "reply": request.replies_so_far,
            "model": request.model,
            "system": request.system,
            "max_tokens": request.max_tokens,
            "tools": [tool.name for tool in request.tools],
            "messages": [_message(message) for message in request.messages],
        }
        return _REQUEST.encode(document).encode("ascii")

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        self.requests.append(body)
        index = _reply_index(body)
        if index >= len(self.replies):
            raise ProviderError(
                f"the script {self.path} has {len(self.replies)} replies; "
                f"reply #{index + 1} was asked for",
                retryable=False,
            )
        scripted: ScriptedReply = self.replies[index]
        attempt = self._attempts.get(index, 0)
        self._attempts[index] = attempt + 1
        if attempt < len(scripted.fail_first):
            failure = scripted.fail_first[attempt]
            raise ProviderError(
                f"{failure.message} (HTTP {failure.status})",
                retryable=failure.status in (408, 429, 529) or failure.status >= 500,
                status=failure.status,
                retry_after=failure.retry_after,
            )
        if on_delta is not None:  # each block as one delta: a script has no pace to keep
            for block, part in enumerate(scripted.reply.content):
                if isinstance(part, Text):
                    on_delta(TextDelta(block, part.text))
                else:
                    on_delta(ToolInputDelta(block, part.id, part.name, json.dumps(part.input)))
        return scripted.reply

    async def close(self) -> None:
        return None


def load_script(path: str, *, follow_links: bool = True) -> tuple[ScriptedReply, ...]:
    """Read and check a script; every problem names the file and line."""
    document = yamlfile.load(
        path, what="model script", max_bytes=MAX_SCRIPT_BYTES, follow_links=follow_links
    )
    if not isinstance(document, dict) or not isinstance(document.get("replies"), list):
        raise ConfigError(f"{path}, line 1: a script is a mapping with a list of `replies`")
    replies = document["replies"]
    return tuple(
        _reply(path, item, yamlfile.line_of(replies, index)) for index, item in enumerate(replies)
    )


def _reply(path: str, item: Any, line: int) -> ScriptedReply:

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{path}, line {line}: {message}")

    if not isinstance(item, dict):
        raise fail("each reply is a mapping (text:, tool_calls:, stop:, empty:, …)")
    unknown = sorted(set(item) - _REPLY_KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_REPLY_KEYS))})")
    text = item.get("text", "")
    if not isinstance(text, str):
        raise fail("text must be a string")
    calls = []
    for number, call in enumerate(item.get("tool_calls") or [], start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise fail(f"tool call {number} needs a name")
        if not isinstance(call.get("input", {}), dict):
            raise fail(f"tool call {number}: input must be a mapping")
        call_id = str(call.get("id") or f"call-{line}-{number}")
        calls.append(ToolCall(call_id, call["name"], yamlfile.plain(call.get("input") or {})))
    content: tuple[Text | ToolCall, ...] = (
        () if item.get("empty") else (((Text(text),) if text else ()) + tuple(calls))
    )
    stop = item.get("stop") or ("tool_use" if calls else "end_turn")
    if stop not in _STOPS:
        raise fail(f"stop must be one of {', '.join(_STOPS)}, not {stop!r}")
    failures = []
    for failure in item.get("fail_first") or []:
        if not isinstance(failure, dict) or not isinstance(failure.get("status"), int):
            raise fail("each fail_first entry needs an HTTP status")
        retry_after = failure.get("retry_after")
        failures.append(
            ScriptedFailure(
                failure["status"], retry_after, failure.get("message", "scripted failure")
            )
        )
    usage = item.get("usage") or {}
    try:
        counted = Usage(**{key: int(value) for key, value in usage.items()})
    except (TypeError, ValueError):
        raise fail(f"usage takes {', '.join(Usage.__dataclass_fields__)}") from None
    reply = ModelReply(content, _stop(stop), counted, provider_stop_reason=stop)
    return ScriptedReply(reply, tuple(failures))


def _reply_index(body: bytes) -> int:
    """The reply a request asks for, read from the head `encode_request` gives every body
    (the whole body is decoded only for any other: a long conversation's is long)."""
    if body.startswith(_REPLY_HEAD):
        end = body.find(b",", len(_REPLY_HEAD))
        digits = body[len(_REPLY_HEAD) : end]
        if end > 0 and digits.isdigit():
            return int(digits)
    index: int = json.loads(body)["reply"]
    return index


def _stop(value: str) -> StopReason:
    return cast(StopReason, value) if value in _STOPS else "other"


def _message(message: Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        match block:
            case Text(text=text):
                blocks.append({"text": text})
            case ToolCall(id=call_id, name=name, input=input):
                blocks.append({"call": call_id, "name": name, "input": input})
            case ToolResult(call_id=call_id, content=content, is_error=is_error):
                blocks.append({"result": call_id, "content": content, "error": is_error})
    return {"role": message.role, "content": blocks}

"""An OpenAI Chat Completions stream read back into the completion its non-streamed reply
is: chunks of `choices[0].delta` (content, refusal, tool calls in fragments by index), the
finish reason, a last chunk with the usage, then `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from noeta.backends.models.sse import ServerSentEvent
from noeta.backends.models.wire import MalformedReply, StreamedError, decode_event
from noeta.core.ports.model import ReplyDelta, TextDelta, ToolInputDelta

DONE = b"[DONE]"

# The status each error type or code is answered with when it comes before the stream.
ERROR_STATUSES = {
    "invalid_request_error": 400,
    "invalid_api_key": 401,
    "authentication_error": 401,
    "insufficient_quota": 429,
    "rate_limit_exceeded": 429,
    "server_error": 500,
}

# How deltas number the reply's blocks: as `_parse_completion` orders them.
CONTENT_BLOCK, REFUSAL_BLOCK, FIRST_CALL_BLOCK = 0, 1, 2

_NO_DELTAS: tuple[ReplyDelta, ...] = ()


@dataclass(slots=True)
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class CompletionStream:
    """One reply's chunks, in order; pieces are joined once at the end."""

    def __init__(self, tell: bool) -> None:
        self._tell = tell  # whether to make deltas: only when a hook hears them
        self._id: object = None
        self._content: list[str] | None = None  # None: no content came (a tool-only reply)
        self._refusal: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._finish_reason: object = None
        self._usage: object = None
        self._done = False

    def take(self, event: ServerSentEvent) -> Sequence[ReplyDelta]:
        if event.data == DONE:
            self._done = True
            return _NO_DELTAS
        chunk = decode_event(event)
        if chunk.get("error") is not None or chunk.get("object") == "error":
            raise _streamed_error(chunk)
        if self._id is None:
            self._id = chunk.get("id")
        if chunk.get("usage") is not None:  # null on every chunk but the last
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or []  # the usage chunk's is [] (vLLM: null)
        if not isinstance(choices, list):
            raise MalformedReply("'choices' is not a list")
        deltas: list[ReplyDelta] = []
        for choice in choices:
            if not isinstance(choice, dict):
                raise MalformedReply("a choice is not an object")
            if choice.get("index", 0) == 0:  # noeta asks for one choice
                self._choice(choice, deltas)
        return deltas or _NO_DELTAS

    def document(self) -> dict[str, object]:
        if not self._done:
            raise MalformedReply("the stream ended before [DONE]")
        message: dict[str, object] = {
            "role": "assistant",
            "content": None if self._content is None else "".join(self._content),
            "refusal": "".join(self._refusal) or None,
        }
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": "".join(call.arguments)},
                }
                for _, call in sorted(self._calls.items())
            ]
        choice = {"index": 0, "message": message, "finish_reason": self._finish_reason}
        document: dict[str, object] = {"choices": [choice], "usage": self._usage}
        if self._id is not None:
            document["id"] = self._id
        return document

    def _choice(self, choice: dict[str, object], deltas: list[ReplyDelta]) -> None:
        if choice.get("finish_reason") is not None:
            self._finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise MalformedReply("'delta' is not an object")
        content = delta.get("content")
        if isinstance(content, str):
            if self._content is None:
                self._content = []
            self._content.append(content)
            if content and self._tell:
                deltas.append(TextDelta(CONTENT_BLOCK, content))
        elif content is not None:
            raise MalformedReply("'content' is not a string")
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
            if self._tell:
                deltas.append(TextDelta(REFUSAL_BLOCK, refusal))
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list):
            raise MalformedReply("'tool_calls' is not a list")
        for call in calls:
            if not isinstance(call, dict):
                raise MalformedReply("a tool call is not an object")
            self._call_fragment(call, deltas)

    def _call_fragment(self, call: dict[str, object], deltas: list[ReplyDelta]) -> None:
        index = call.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # A server that numbers no call sends each whole, in one fragment.
            index = len(self._calls)
        parts = self._calls.setdefault(index, _CallParts())
        call_id, function = call.get("id"), call.get("function") or {}
        if not isinstance(function, dict):
            raise MalformedReply("'function' is not an object")
        name, arguments = function.get("name"), function.get("arguments")
        # The id and name come with a call's first fragment; some servers repeat them.
        if isinstance(call_id, str) and call_id:
            parts.id = call_id
        if isinstance(name, str) and name:
            parts.name = name
        if isinstance(arguments, str) and arguments:
            parts.arguments.append(arguments)
            if self._tell:
                block = FIRST_CALL_BLOCK + index
                deltas.append(ToolInputDelta(block, parts.id, parts.name, arguments))
        elif arguments is not None and not isinstance(arguments, str):
            raise MalformedReply("the tool arguments are not a string")


def _streamed_error(chunk: dict[str, object]) -> StreamedError:
    error = chunk.get("error")
    source = error if isinstance(error, dict) else chunk
    kind, code, message = source.get("type"), source.get("code"), source.get("message")
    known = next(
        (name for name in (code, kind) if isinstance(name, str) and name in ERROR_STATUSES),
        "unknown",
    )
    status = ERROR_STATUSES.get(known, 500)
    if known == "unknown" and isinstance(code, int) and 400 <= code <= 599:
        status = code  # vLLM: {"object": "error", "code": 400, ...}
    if isinstance(error, str):  # {"error": "…"}, as Ollama words its errors
        message = error
    detail = ": ".join(part for part in (kind, message) if isinstance(part, str) and part)
    return StreamedError(status, known, detail)

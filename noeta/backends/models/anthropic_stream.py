"""An Anthropic Messages stream read back into the message its non-streamed reply is:
`message_start`, then each content block's start, deltas and stop, then `message_delta`
(stop reason, usage) and `message_stop`; `ping` and unknown events are read past.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from noeta.backends.models.sse import ServerSentEvent
from noeta.backends.models.wire import MalformedReply, StreamedError, decode_event, member
from noeta.core.ports.model import ReplyDelta, TextDelta, ToolInputDelta

# The status each documented error type is answered with when it comes before the stream.
ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}

_NO_DELTAS: tuple[ReplyDelta, ...] = ()

# A text delta as the API sends it (compact JSON), with a text JSON needs no escape for:
# read without decoding JSON (a long reply is a thousand of them). Any other form of it,
# spaced, reordered or escaped, is decoded as JSON.
_TEXT_DELTA = re.compile(
    rb'\{"type":"content_block_delta","index":(0|[1-9][0-9]{0,8}),'
    rb'"delta":\{"type":"text_delta","text":"([^"\\\x00-\x1f]*)"\}\}'
)


class MessageStream:
    """One reply's events, in order. Text and tool input are kept as their pieces and joined
    once at the end: appending to a string per delta would copy the text each time."""

    def __init__(self, tell: bool) -> None:
        self._tell = tell  # whether to make deltas: only when a hook hears them
        self._message: dict[str, object] | None = None
        self._usage: dict[str, object] | None = None  # None: the stream sent none
        self._blocks: dict[int, dict[str, object]] = {}
        self._pieces: dict[int, list[str]] = {}  # a text block's text, a tool call's input
        self._stopped = False

    def take(self, event: ServerSentEvent) -> Sequence[ReplyDelta]:
        name = event.event
        if name == "content_block_delta":  # nearly every event, most of them text
            text = _TEXT_DELTA.fullmatch(event.data)
            if text is not None:
                block = self._blocks.get(int(text[1]))
                if block is not None and block.get("type") == "text":
                    return self._text(int(text[1]), text[2])
        elif name == "ping":
            return _NO_DELTAS
        document = decode_event(event)
        if name == "message":  # a relay that drops the event lines: the data names it
            kind = document.get("type")
            name = kind if isinstance(kind, str) else name
        if name == "content_block_delta":  # nearly every event: tested first
            return self._delta(document)
        if name == "error":
            raise _streamed_error(document)
        if name == "message_start":
            self._message = dict(member(document, "message", dict))
            usage = self._message.get("usage")
            self._usage = dict(usage) if isinstance(usage, dict) else None
        elif name == "content_block_start":
            self._start_block(document)
        elif name == "message_delta":
            self._message_delta(document)
        elif name == "message_stop":
            self._stopped = True
        # content_block_stop adds nothing: a block is read whole at the end.
        return _NO_DELTAS

    def document(self) -> dict[str, object]:
        if self._message is None or not self._stopped:
            raise MalformedReply("the stream ended before message_stop")
        content: list[dict[str, object]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            pieces = self._pieces.get(index)
            if block.get("type") == "text" and pieces:
                block["text"] = str(block.get("text") or "") + "".join(pieces)
            elif block.get("type") == "tool_use" and pieces:
                block["input"] = _tool_input("".join(pieces))
            content.append(block)
        return {**self._message, "content": content, "usage": self._usage}

    def _start_block(self, document: dict[str, object]) -> None:
        if self._message is None:
            raise MalformedReply("a content block started before message_start")
        index = member(document, "index", int)
        if index in self._blocks:
            raise MalformedReply(f"content block {index} started twice")
        self._blocks[index] = dict(member(document, "content_block", dict))
        self._pieces[index] = []

    def _text(self, index: int, raw: bytes) -> Sequence[ReplyDelta]:
        """A text delta read from its bytes: the API's own form, its text without a
        character JSON escapes; anything else is decoded as JSON."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedReply("a 'content_block_delta' event is not JSON") from None
        self._pieces[index].append(text)
        return (TextDelta(index, text),) if text and self._tell else _NO_DELTAS

    def _delta(self, document: dict[str, object]) -> Sequence[ReplyDelta]:
        index, delta = document.get("index"), document.get("delta")
        if not isinstance(index, int) or index not in self._blocks or not isinstance(delta, dict):
            raise MalformedReply(f"a delta for content block {index!r}, which never started")
        block = self._blocks[index]
        kind = delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            text = delta.get("text")
            if not isinstance(text, str):
                raise MalformedReply("'text' is missing or not of type str")
            self._pieces[index].append(text)
            return (TextDelta(index, text),) if text and self._tell else _NO_DELTAS
        if kind == "input_json_delta" and block.get("type") == "tool_use":
            fragment = delta.get("partial_json")
            if not isinstance(fragment, str):
                raise MalformedReply("'partial_json' is missing or not of type str")
            self._pieces[index].append(fragment)
            if not fragment or not self._tell:
                return _NO_DELTAS
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise MalformedReply("a tool_use block has no id or name")
            return (ToolInputDelta(index, call_id, name, fragment),)
        # Thinking, signatures, citations: parts of features noeta does not request.
        return _NO_DELTAS

    def _message_delta(self, document: dict[str, object]) -> None:
        if self._message is None:
            raise MalformedReply("message_delta came before message_start")
        delta = member(document, "delta", dict)
        for key in ("stop_reason", "stop_sequence"):
            if key in delta:
                self._message[key] = delta[key]
        usage = document.get("usage")
        if isinstance(usage, dict):
            # Its counts are the totals so far; a count it leaves out or null stays as
            # message_start gave it (input and cache counts, on older API versions).
            if self._usage is None:
                self._usage = {}
            self._usage.update((key, value) for key, value in usage.items() if value is not None)
        elif usage is not None:
            raise MalformedReply("'usage' is not an object")


def _tool_input(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        raise MalformedReply("the model returned tool input that is not valid JSON") from None


def _streamed_error(document: dict[str, object]) -> StreamedError:
    error = document.get("error")
    error = error if isinstance(error, dict) else document
    kind, message = error.get("type"), error.get("message")
    known = kind if isinstance(kind, str) and kind in ERROR_STATUSES else "unknown"
    detail = ": ".join(part for part in (kind, message) if isinstance(part, str) and part)
    return StreamedError(ERROR_STATUSES.get(known, 500), known, detail)

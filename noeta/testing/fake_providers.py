"""Local HTTP servers that speak the Anthropic Messages and OpenAI Chat Completions wire
protocols, so provider adapters are tested over real HTTP without leaving 127.0.0.1.

    with FakeAnthropic() as server:  # or FakeOpenAI(); base_url ends in /v1 for OpenAI
        server.script(HttpError(429, retry_after="2"), Reply(text="hi", input_tokens=7))
        provider = AnthropicProvider("key", base_url=server.base_url)
        ...
        server.requests[0].body         # the raw bytes; .json() decodes, .headers by name

Each request takes the next scripted response, or `Reply()` when none is queued:

- `Reply(text, tool_calls, stop_reason, input_tokens, output_tokens, cache_read_tokens,
  cache_write_tokens, piece_chars)`: a normal answer. `text=None` sends no text;
  `stop_reason` is the wire value and defaults to the tool-use or end-of-turn one. Token
  counts mean what noeta's `Usage` means: `input_tokens` excludes the cached ones. A
  request that asks for a stream (`"stream": true`) gets it as the API streams it
  (`fake_streams`), the text and tool arguments in small uneven pieces (or of
  `piece_chars` each); any other request, one JSON document.
- `RawStream(parts, end="done")`: a 200 event stream of these bytes (`server.stream_of`
  renders a reply's events, `server.error_event` an error event, to edit into faults);
  `end` is "done" (the body ends), "drop" (the connection closes mid-body) or "stall".
- `HttpError(status, retry_after=None, body=None, headers={})`: an error status; the body
  defaults to the provider's error JSON (FakeOpenAI's 401 quotes the key, as OpenAI does).
- `RawBody(body, status=200)`: any bytes, e.g. truncated or non-JSON or empty.
- `Drop()`: close the connection without answering.
- `Stall()`: answer nothing until the server stops, so the client times out.

`server.chunk_bytes = 7` writes every stream in pieces of 7 bytes, cut inside lines and
characters; `server.part_seconds = 0.01` waits that long between a stream's writes (a
model's pace); `Reply(pause_after=N)` stops a stream after N writes, sets
`server.paused` and waits for the test to set `server.resume`; `server.first_bytes`
holds when (time.monotonic()) each stream's first byte was written; `server.reset()`
makes a shared server as new for the next test.

`server.limit_rate(10, retry_after="1")` makes it a rate-limited provider: a token bucket
of 10 requests refilled at 10 a second; a request finding it empty is answered 429 with
that Retry-After (before any scripted response). `server.arrivals` holds each request's
arrival (time.monotonic()) and the status it was answered, in order.
"""

from __future__ import annotations

import json
import re

from noeta.testing import fake_streams
from noeta.testing.fake_server import (
    Drop,
    FakeServer,
    HttpError,
    RawBody,
    RawStream,
    RecordedRequest,
    Reply,
    Response,
    Stall,
)

__all__ = [
    "Drop",
    "FakeAnthropic",
    "FakeOpenAI",
    "HttpError",
    "RawBody",
    "RawStream",
    "RecordedRequest",
    "Reply",
    "Response",
    "Stall",
]


class FakeAnthropic(FakeServer):
    path = "/v1/messages"
    request_id_header = "request-id"

    def render_reply(self, reply: Reply, model: str, number: int) -> dict[str, object]:
        content: list[dict[str, object]] = []
        if reply.text is not None:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
            )
        return _omitting_no_usage(
            {
                "id": f"msg_fake_{number}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": _anthropic_stop(reply),
                "stop_sequence": None,
                "usage": _anthropic_usage(reply),
            }
        )

    def stream_of(self, reply: Reply, model: str = "fake-model", number: int = 1) -> list[bytes]:
        stop, usage = _anthropic_stop(reply), _anthropic_usage(reply)
        return fake_streams.anthropic_events(reply, model, number, stop, usage)

    def error_event(self, status: int) -> bytes:
        return fake_streams.sse(self.render_error(status, _NO_REQUEST), "error")

    def render_error(self, status: int, request: RecordedRequest) -> dict[str, object]:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        message = f"fake {kind.replace('_', ' ')}"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def refusal(self, request: RecordedRequest) -> dict[str, object] | None:
        try:
            messages = request.json().get("messages") or []
        except (ValueError, AttributeError):
            return None
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                text = block.get("text") if isinstance(block, dict) else None
                if block.get("type") == "text" and isinstance(text, str) and not text.strip():
                    reason = "messages: text content blocks must contain non-whitespace text"
                    return {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": reason},
                    }
        return None


def _omitting_no_usage(document: dict[str, object]) -> dict[str, object]:
    """A reply without usage has no `usage` key at all, as the servers that omit it send."""
    if document.get("usage") is None:
        del document["usage"]
    return document


def _anthropic_stop(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _anthropic_usage(reply: Reply) -> dict[str, int] | None:
    if not reply.with_usage:
        return None
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": reply.cache_write_tokens,
        "cache_read_input_tokens": reply.cache_read_tokens,
        "output_tokens": reply.output_tokens,
    }


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeOpenAI(FakeServer):
    path = "/v1/chat/completions"
    prefix = "/v1"

    def __init__(self) -> None:
        super().__init__()
        # As an older vLLM or proxy: a request with `stream_options` is refused (400).
        self.refuses_stream_options = False

    def reset(self) -> None:
        super().reset()
        self.refuses_stream_options = False

    def render_reply(self, reply: Reply, model: str, number: int) -> dict[str, object]:
        message: dict[str, object] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.input)},
                }
                for call in reply.tool_calls
            ]
        return _omitting_no_usage(
            {
                "id": f"chatcmpl-fake-{number}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": _openai_finish(reply),
                    }
                ],
                "usage": _openai_usage(reply),
            }
        )

    def stream_of(self, reply: Reply, model: str = "fake-model", number: int = 1) -> list[bytes]:
        finish, usage = _openai_finish(reply), _openai_usage(reply)
        return fake_streams.openai_events(reply, model, number, finish, usage)

    def error_event(self, status: int) -> bytes:
        return fake_streams.sse(self.render_error(status, _NO_REQUEST))

    def render_error(self, status: int, request: RecordedRequest) -> dict[str, object]:
        default_kind = "server_error" if status >= 500 else "invalid_request_error"
        kind, code = _OPENAI_ERROR_TYPES.get(status, (default_kind, None))
        message = f"fake {kind.replace('_', ' ')}"
        if status == 401:
            # OpenAI quotes the key it refused (partly masked); quoting all of it tests that
            # adapters keep keys out of their errors.
            key = request.headers.get("authorization", "").removeprefix("Bearer ")
            message = f"Incorrect API key provided: {key}."
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def refusal(self, request: RecordedRequest) -> dict[str, object] | None:
        try:
            document = request.json()
        except ValueError:
            return None
        if (
            self.refuses_stream_options
            and isinstance(document, dict)
            and "stream_options" in document
        ):
            reason = "Unrecognized request argument supplied: stream_options"
            error = {"message": reason, "type": "invalid_request_error", "param": None}
            return {"error": {**error, "code": None}}
        model = document.get("model") if isinstance(document, dict) else None
        if isinstance(model, str) and "max_tokens" in document and _REASONING.match(model):
            reason = (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
            error = {"message": reason, "type": "invalid_request_error", "param": "max_tokens"}
            return {"error": {**error, "code": "unsupported_parameter"}}
        return None


def _openai_finish(reply: Reply) -> str:
    return reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")


def _openai_usage(reply: Reply) -> dict[str, object] | None:
    if not reply.with_usage:
        return None
    prompt_tokens = reply.input_tokens + reply.cache_read_tokens
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": prompt_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
    }


_NO_REQUEST = RecordedRequest("POST", "", {}, b"")

# The models OpenAI documents as reasoning models (o-series, gpt-5 family).
_REASONING = re.compile(r"(o\d|gpt-5)(\b|[-.])")

_OPENAI_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("requests", "rate_limit_exceeded"),
}

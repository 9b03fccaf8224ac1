"""What the provider fakes stream for a `Reply`: each API's events in its own words, the
text and the tool arguments cut into small pieces at awkward places (inside a key, an
escape, a multi-byte character's neighbours), and the usage where each API sends it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # fake_server writes what this module renders
    from noeta.testing.fake_server import Reply

# The lengths of successive pieces, in characters: uneven, so that pieces end anywhere.
PIECE_CHARS = (1, 4, 2, 7, 3, 5)


def sse(data: object, event: str | None = None) -> bytes:
    """One event. Compact UTF-8 JSON as the APIs send it (not \\u escapes), so bytes cut
    anywhere can split a character."""
    compact = (",", ":")
    text = (
        data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=compact)
    )
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def pieces(text: str, every: int | None = None) -> Iterator[str]:
    sizes = (every,) if every else PIECE_CHARS
    start, turn = 0, 0
    while start < len(text):
        size = sizes[turn % len(sizes)]
        yield text[start : start + size]
        start, turn = start + size, turn + 1


def tool_arguments(call_input: object) -> str:
    # ASCII escapes (é as \\u00e9): the pieces then also cut escapes in two.
    return json.dumps(call_input)


def anthropic_events(
    reply: Reply, model: str, number: int, stop_reason: str, usage: dict[str, int] | None
) -> list[bytes]:
    message: dict[str, object] = {
        "id": f"msg_fake_{number}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    if usage is not None:  # None: a server that sends no usage
        message["usage"] = {**usage, "output_tokens": 1}
    events = [sse({"type": "message_start", "message": message}, "message_start")]
    index = 0
    if reply.text is not None:
        block: dict[str, object] = {"type": "text", "text": ""}
        events.append(_block_start(index, block))
        events.append(sse({"type": "ping"}, "ping"))
        for piece in pieces(reply.text, reply.piece_chars):
            events.append(_block_delta(index, {"type": "text_delta", "text": piece}))
        events.append(_block_stop(index))
        index += 1
    for call in reply.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append(_block_start(index, block))
        events.append(_block_delta(index, {"type": "input_json_delta", "partial_json": ""}))
        for piece in pieces(tool_arguments(call.input), reply.piece_chars):
            events.append(_block_delta(index, {"type": "input_json_delta", "partial_json": piece}))
        events.append(_block_stop(index))
        index += 1
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    ending: dict[str, object] = {"type": "message_delta", "delta": delta}
    if usage is not None:
        ending["usage"] = {"output_tokens": usage["output_tokens"]}
    events.append(sse(ending, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events


def anthropic_error(document: dict[str, object]) -> bytes:
    return sse(document, "error")


def _block_start(index: int, block: dict[str, object]) -> bytes:
    document = {"type": "content_block_start", "index": index, "content_block": block}
    return sse(document, "content_block_start")


def _block_delta(index: int, delta: dict[str, object]) -> bytes:
    return sse(
        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
    )


def _block_stop(index: int) -> bytes:
    return sse({"type": "content_block_stop", "index": index}, "content_block_stop")


def openai_events(
    reply: Reply, model: str, number: int, finish_reason: str, usage: dict[str, object] | None
) -> list[bytes]:
    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**head, "choices": [choice], "usage": None})

    head = {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "system_fingerprint": "fp_fake",
    }
    events: list[bytes] = []
    # A text reply opens with empty content; a reply of calls only, with null.
    opening = {"role": "assistant", "content": "" if reply.text is not None else None}
    events.append(chunk({**opening, "refusal": None}))
    for piece in pieces(reply.text or "", reply.piece_chars):
        events.append(chunk({"content": piece}))
    for index, call in enumerate(reply.tool_calls):
        function = {"name": call.name, "arguments": ""}
        first = {"index": index, "id": call.id, "type": "function", "function": function}
        events.append(chunk({"tool_calls": [first]}))
        for piece in pieces(tool_arguments(call.input), reply.piece_chars):
            fragment = {"index": index, "function": {"arguments": piece}}
            events.append(chunk({"tool_calls": [fragment]}))
    events.append(chunk({}, finish_reason))
    if usage is not None:  # None: a server that sends no usage chunk
        events.append(sse({**head, "choices": [], "usage": usage}))
    events.append(sse("[DONE]"))
    return events


def openai_error(document: dict[str, object]) -> bytes:
    return sse(document)

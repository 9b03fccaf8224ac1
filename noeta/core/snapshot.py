"""A folded `TaskState` as bytes and back, for snapshots. Pure; exact round trip.

A snapshot is only ever read by code of the same version (`version_of`), so this format
needs no compatibility rules: another version ignores it and folds from the start.
"""

from __future__ import annotations

import hashlib
from typing import Any

from noeta.core import payload
from noeta.core.events import TaskCreated, decode, encode
from noeta.core.fold import TaskState
from noeta.core.model import Message, Text, ToolCall, ToolResult
from noeta.core.payload import JSONValue


def version_of(*parts: str) -> str:
    """A snapshot version from everything that decides the fold (code, agent, plugin pins)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


def dump(state: TaskState) -> bytes:
    config: JSONValue = None
    if state.config is not None:
        config = encode(state.config)[1]
    document: dict[str, JSONValue] = {
        "config": config,
        "last_seq": state.last_seq,
        "messages": [_message(m) for m in state.messages],
        "turn": state.turn,
        "turn_open": state.turn_open,
        "model_attempts": state.model_attempts,
        "replies": state.replies,
        "truncated_in_row": state.truncated_in_row,
        "empty_in_row": state.empty_in_row,
        "internal_errors_in_row": state.internal_errors_in_row,
        "calls": [_block(c) for c in state.calls],
        "started": [[call_id, starts] for call_id, starts in state.started],
        "results": [_block(r) for r in state.results],
        "last_answer": state.last_answer,
        "last_turn_outcome": state.last_turn_outcome,
        "last_turn_error": state.last_turn_error,
        "finished": state.finished,
        "taken_inbox": list[JSONValue](sorted(state.taken_inbox)),
    }
    return payload.encode(document).encode("ascii")


def load(data: bytes) -> TaskState:
    document: Any = payload.decode(data.decode("ascii"))
    config = None
    if document["config"] is not None:
        decoded = decode("TaskCreated", document["config"])
        assert isinstance(decoded, TaskCreated)
        config = decoded
    return TaskState(
        config=config,
        last_seq=document["last_seq"],
        messages=tuple(
            Message(m["role"], tuple(_from_block(b) for b in m["content"]))
            for m in document["messages"]
        ),
        turn=document["turn"],
        turn_open=document["turn_open"],
        model_attempts=document["model_attempts"],
        replies=document["replies"],
        truncated_in_row=document["truncated_in_row"],
        empty_in_row=document["empty_in_row"],
        internal_errors_in_row=document["internal_errors_in_row"],
        calls=tuple(_from_block(c) for c in document["calls"]),  # type: ignore[misc]
        started=tuple((call_id, starts) for call_id, starts in document["started"]),
        results=tuple(_from_block(r) for r in document["results"]),  # type: ignore[misc]
        last_answer=document["last_answer"],
        last_turn_outcome=document["last_turn_outcome"],
        last_turn_error=document["last_turn_error"],
        finished=document["finished"],
        taken_inbox=frozenset(document["taken_inbox"]),
    )


def _message(message: Message) -> JSONValue:
    return {"role": message.role, "content": [_block(b) for b in message.content]}


def _block(block: Text | ToolCall | ToolResult) -> JSONValue:
    match block:
        case Text(text=text):
            return {"t": "text", "text": text}
        case ToolCall(id=call_id, name=name, input=input):
            return {"t": "call", "id": call_id, "name": name, "input": input}
        case ToolResult(call_id=call_id, content=content, is_error=is_error):
            return {"t": "result", "id": call_id, "content": content, "error": is_error}


def _from_block(block: Any) -> Text | ToolCall | ToolResult:
    kind = block["t"]
    if kind == "text":
        return Text(block["text"])
    if kind == "call":
        return ToolCall(block["id"], block["name"], block["input"])
    return ToolResult(block["id"], block["content"], block["error"])

"""A folded `TaskState` as bytes and back, for snapshots. Pure; exact round trip.

A snapshot is only ever read by code of the same version (`version_of`), so this format
needs no compatibility rules: another version ignores it and folds from the start.
The format is marshal of plain values, compressed, behind a checksum: ten times faster
to load than JSON, and unlike pickle it never runs code (ADR-002).
"""

from __future__ import annotations

import gc
import hashlib
import marshal
import sys
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from noeta.core.ports.model import Message, Text, ToolCall, ToolResult
from noeta.core.ports.pin import Pin
from noeta.core.rules.conversation import Conversation
from noeta.core.rules.events import TaskCreated, decode, encode
from noeta.core.rules.task_state import TaskState

MARSHAL_VERSION = 4
FORMAT = b"noeta-snapshot-1\n"


def version_of(*parts: str) -> str:
    """A snapshot version from everything that decides the fold (code, agent, plugin pins)."""
    digest = hashlib.sha256()
    # marshal's format may differ between Python versions: a snapshot is theirs alone.
    digest.update(f"{sys.version_info[:2]}-{MARSHAL_VERSION}".encode())
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


def dump(state: TaskState) -> bytes:
    config = None if state.config is None else encode(state.config)[1]
    scalars = tuple(_TO_PLAIN.get(name, _same)(getattr(state, name)) for name in _SCALARS)
    document = (
        config,
        scalars,
        tuple((m.role, tuple(_block(b) for b in m.content)) for m in state.messages),
        tuple(_block(call) for call in state.calls),
        state.started,
        tuple(_block(result) for result in state.results),
        tuple(sorted(state.taken_inbox)),
    )
    compressed = zlib.compress(marshal.dumps(document, MARSHAL_VERSION), 1)
    return FORMAT + hashlib.sha256(compressed).digest() + compressed


def load(data: bytes) -> TaskState:
    """The state a snapshot holds; ValueError if it is not one this code wrote, intact."""
    if not data.startswith(FORMAT):
        raise ValueError("not a snapshot of this format")
    digest, compressed = data[len(FORMAT) : len(FORMAT) + 32], data[len(FORMAT) + 32 :]
    if hashlib.sha256(compressed).digest() != digest:
        raise ValueError("the snapshot is corrupt (checksum mismatch)")
    # Tens of thousands of small objects: the cyclic GC would rescan them over and over.
    collecting = gc.isenabled()
    gc.disable()
    try:
        config, scalars, messages, calls, started, results, taken = marshal.loads(
            zlib.decompress(compressed)
        )
        block = _from_block
        # Fields added to the state since (subtasks) hold their defaults in an older one.
        scalars = (*scalars, *_DEFAULTS[len(scalars) :])
        # Built when a request needs it, not here: it was most of a long task's resume.
        conversation: Sequence[Message] = Conversation(messages, _message) if messages else ()
        state = TaskState(
            config=None if config is None else _config(config),
            messages=conversation,
            calls=tuple(map(block, calls)),  # type: ignore[arg-type]
            started=tuple(started),
            results=tuple(map(block, results)),  # type: ignore[arg-type]
            taken_inbox=frozenset(taken),
            **{
                name: _FROM_PLAIN.get(name, _same)(value)
                for name, value in zip(_SCALARS, scalars, strict=True)
            },
        )
    finally:
        if collecting:
            gc.enable()
    return state


_COLLECTIONS = ("config", "messages", "calls", "started", "results", "taken_inbox")
_SCALARS = tuple(name for name in TaskState.__dataclass_fields__ if name not in _COLLECTIONS)
_DEFAULTS = tuple(TaskState.__dataclass_fields__[name].default for name in _SCALARS)

# marshal takes plain values only: a pin is stored as its four strings, as in the event
# (and as snapshots held it before the state used the Pin type).
_TO_PLAIN: dict[str, Callable[[Any], Any]] = {
    "pins": lambda pins: tuple(pin.as_tuple() for pin in pins),
}
_FROM_PLAIN: dict[str, Callable[[Any], Any]] = {
    "pins": lambda pins: tuple(Pin(*pin) for pin in pins),
}


def _same(value: Any) -> Any:
    return value


def _config(data: Any) -> TaskCreated:
    decoded = decode("TaskCreated", data)
    if not isinstance(decoded, TaskCreated):
        raise ValueError("the snapshot's configuration is not a TaskCreated")
    return decoded


def _block(block: Text | ToolCall | ToolResult) -> tuple[Any, ...]:
    match block:
        case Text(text=text):
            return (0, text)
        case ToolCall(id=call_id, name=name, input=input):
            return (1, call_id, name, input)
        case ToolResult(call_id=call_id, content=content, is_error=is_error):
            return (2, call_id, content, is_error)


def _message(raw: tuple[str, tuple[Any, ...]]) -> Message:
    role, blocks = raw
    return Message(role, tuple(map(_from_block, blocks)))  # type: ignore[arg-type]


def _from_block(block: tuple[Any, ...]) -> Text | ToolCall | ToolResult:
    kind = block[0]
    if kind == 0:
        return Text(block[1])
    if kind == 1:
        return ToolCall(block[1], block[2], block[3])
    return ToolResult(block[1], block[2], block[3])

"""The conversation a task's requests are built from, as an immutable sequence that a
snapshot can restore without building every message: a resume pays for the history only
when a request needs it (most resumes end in a wait, or a tool call)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from noeta.core.ports.model import Message


class Conversation(Sequence[Message]):
    """Messages: a prefix kept raw until first read, then the messages added since."""

    __slots__ = ("_build", "_built", "_raw", "_tail")

    def __init__(
        self,
        raw: tuple[Any, ...] = (),
        build: Callable[[Any], Message] | None = None,
        tail: tuple[Message, ...] = (),
    ) -> None:
        self._raw = raw
        self._build = build
        self._built: tuple[Message, ...] | None = None if raw else ()
        self._tail = tail

    def extended(self, more: Sequence[Message]) -> Conversation:
        joined = Conversation(self._raw, self._build, self._tail + tuple(more))
        joined._built = self._built
        return joined

    def _prefix(self) -> tuple[Message, ...]:
        if self._built is None:
            assert self._build is not None
            self._built = tuple(map(self._build, self._raw))
        return self._built

    def __len__(self) -> int:
        return (
            len(self._raw) + len(self._tail)
            if self._built is None
            else (len(self._built) + len(self._tail))
        )

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return tuple(self)[index]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(index)
        head = size - len(self._tail)
        if index >= head:
            return self._tail[index - head]
        if self._built is None:  # one message, without building the rest
            assert self._build is not None
            return self._build(self._raw[index])
        return self._built[index]

    def __iter__(self) -> Iterator[Message]:
        yield from self._prefix()
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Conversation({len(self)} messages)"


def extend(messages: Sequence[Message], more: Sequence[Message]) -> Sequence[Message]:
    """`messages` followed by `more`, keeping a lazy prefix lazy."""
    if not more:
        return messages
    if isinstance(messages, Conversation):
        return messages.extended(more)
    return tuple(messages) + tuple(more)

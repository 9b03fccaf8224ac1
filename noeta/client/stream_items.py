"""What `AsyncClient.stream` yields (ADR-0105, ADR-0114): a reply's text and a tool call's
output as they stream, and the markers that keep a reader honest across crashes:
restarted, final, lost, finished."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from noeta.core.ports.model import Text
from noeta.core.ports.reply_streams import Cursor
from noeta.core.rules import events


@dataclass(frozen=True, slots=True)
class StreamText:
    """More of the reply being streamed: `text` follows what block `block` had so far.
    `cursor`: pass it back as `stream(after=)` to resume after this item."""

    text: str
    block: int
    cursor: Cursor


@dataclass(frozen=True, slots=True)
class StreamToolOutput:
    """More of a tool call's output as it is written (Bash's, ADR-0114): `stream` says
    whether it is `stdout` or `stderr`; `truncated` (text: a note) once the output passed
    the bound of the stored result: no more of it streams, the result keeps its end.
    `call_id` is the model's id of the call, `call_seq` the seq of its ToolStarted."""

    call_id: str
    call_seq: int
    stream: Literal["stdout", "stderr", "truncated"]
    text: str
    cursor: Cursor


@dataclass(frozen=True, slots=True)
class StreamRestarted:
    """The text shown since the last final is void: the call was sent again (a worker
    took the task over: a new `call_seq`; the provider was retried: a new `attempt`), or
    with `lost_text`, part of the stream was lost (the database restarted) and the text
    that follows does not join what came before. The final brings the whole reply."""

    call_seq: int
    attempt: int
    lost_text: bool
    cursor: Cursor


@dataclass(frozen=True, slots=True)
class StreamFinal:
    """The call's outcome is in the log as event `event_seq`: `ModelReplied`, whose text
    (its text blocks joined) is `text`, or `ModelFailed` (text ""); for a tool call
    (`call_id` set), `ToolFinished`, whose `text` is the result the model read."""

    event_seq: int
    event_type: str
    text: str
    cursor: Cursor
    call_id: str = ""


@dataclass(frozen=True, slots=True)
class StreamLost:
    """A tool call's worker died while it ran, and the call is not safe to run again: the
    log records it as cut, its outcome unknown (`ToolFinished` at `event_seq`). The
    output shown is all there is of it; none comes again as new."""

    call_id: str
    call_seq: int
    event_seq: int
    cursor: Cursor


@dataclass(frozen=True, slots=True)
class StreamFinished:
    """The task finished (`status`: done, failed or cancelled); nothing more comes."""

    status: str


StreamItem = (
    StreamText | StreamToolOutput | StreamRestarted | StreamFinal | StreamLost | StreamFinished
)


def void_words(marker: StreamRestarted) -> str:
    """What a reader is told of a restart (`tail --follow` and `noeta web` alike)."""
    if marker.lost_text:
        return "the text above is void: part of the text was lost"
    return f"the text above is void: sent again (call {marker.call_seq}, attempt {marker.attempt})"


def lost_words(marker: StreamLost) -> str:
    """What a reader is told of a command whose worker died (`tail` and `noeta web`)."""
    return (
        f"{marker.call_id}: its worker died while it ran; recorded as cut (seq {marker.event_seq})"
    )


def reply_text(event: events.Event | events.UnknownEvent) -> str:
    """A reply's text as a stream assembles it: its text blocks, joined."""
    if not isinstance(event, events.ModelReplied):
        return ""
    return "".join(part.text for part in event.content if isinstance(part, Text))

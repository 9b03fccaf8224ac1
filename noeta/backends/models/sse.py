"""Server-Sent Events framing (the WHATWG `text/event-stream` rules): bytes as they arrive
in, whole events out, with every pending line and event bounded in size.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"


class EventStreamError(Exception):
    """The bytes break the framing or a bound; the stream cannot be read on."""


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str  # "message" when the server named none, as the standard says
    data: bytes  # the event's `data:` lines joined by LF, still encoded


class EventStreamDecoder:
    """Fed chunks cut anywhere (inside a line, a CRLF or a UTF-8 character), returns each
    event once its blank line has come. Only new bytes are scanned for line ends, so a
    long line arriving in many chunks costs its length once, not once per chunk.
    """

    def __init__(self, max_event_bytes: int) -> None:
        self._max_event_bytes = max_event_bytes
        self._partial: list[bytes] = []  # the line being received, without its end
        self._partial_bytes = 0
        self._after_cr = False  # a CR ended the last chunk: a LF opening the next is its pair
        self._started = False
        self._head = b""
        self._event = ""
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._names: dict[bytes, str] = {}
        self._held: list[bytes] = []  # LF-ended lines of an event not yet ended
        self._held_bytes = 0

    @property
    def mid_event(self) -> bool:
        """Whether bytes of an event not yet ended have come: at the end of the stream,
        an event cut short."""
        return bool(self._held or self._partial or self._data or self._event or self._head)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if (
            self._started
            and not (self._after_cr or self._partial or self._data or self._event)
            and b"\r" not in chunk
        ):
            # LF-ended lines, from an event's start, as the APIs send them: the events
            # read a block at a time, not a line at a time; the one not yet ended held
            # (joined once it ends: only new bytes are scanned).
            held = self._held
            if chunk.rfind(b"\n\n") < 0 and not (
                chunk.startswith(b"\n") and held and held[-1].endswith(b"\n")
            ):
                held.append(chunk)
                self._held_bytes += len(chunk)
                if self._held_bytes > self._max_event_bytes:
                    raise EventStreamError(f"an event is over {self._max_event_bytes:,} bytes")
                return []
            data = b"".join((*held, chunk)) if held else chunk
            end = data.rfind(b"\n\n") + 2
            events, rest = self._plain_events(data[:end])
            tail = data[end:]
            if rest:  # an event to read line by line: it and all after it are
                self._held, self._held_bytes = [], 0
                events.extend(self._lines(rest + tail))
            else:
                self._held, self._held_bytes = [tail] if tail else [], len(tail)
                if len(tail) > self._max_event_bytes:
                    raise EventStreamError(f"an event is over {self._max_event_bytes:,} bytes")
            return events
        if self._held:
            chunk = b"".join((*self._held, chunk))
            self._held, self._held_bytes = [], 0
        return self._lines(chunk)

    def _plain_events(self, chunk: bytes) -> tuple[list[ServerSentEvent], bytes]:
        """The events of `chunk` that are `event: NAME` (or none) and one `data:` line;
        the bytes from the first that is not, to be read line by line."""
        events: list[ServerSentEvent] = []
        blocks = chunk.split(b"\n\n")
        blocks.pop()  # b"": the chunk ends with the blank line
        for index, block in enumerate(blocks):
            head, newline, rest = block.partition(b"\n")
            if head.startswith(b"event: ") and rest.startswith(b"data: ") and b"\n" not in rest:
                name, data = self._name(head[7:]), rest[6:]
            elif head.startswith(b"data: ") and not newline:
                name, data = "message", head[6:]
            else:
                return events, b"\n\n".join(blocks[index:]) + b"\n\n"
            if len(data) >= self._max_event_bytes:
                raise EventStreamError(f"an event is over {self._max_event_bytes:,} bytes")
            events.append(ServerSentEvent(name, data))
        return events, b""

    def _name(self, raw: bytes) -> str:
        name = self._names.get(raw)
        if name is None:
            name = raw.decode("utf-8", "replace") or "message"
            if len(self._names) < 32:  # an API names a handful; a hostile server, any
                self._names[raw] = name
        return name

    def _lines(self, chunk: bytes) -> list[ServerSentEvent]:
        if not self._started:  # a byte order mark opening the stream is no part of it
            chunk = self._head + chunk
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._head = chunk
                return []
            self._started, self._head = True, b""
            chunk = chunk.removeprefix(_BOM)
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        if not chunk:
            return []
        self._after_cr = chunk.endswith(b"\r")
        lines = chunk.splitlines()  # on CR, LF and CRLF: those of the standard
        last = b"" if chunk.endswith((b"\n", b"\r")) else lines.pop()
        if lines and self._partial:
            lines[0] = b"".join((*self._partial, lines[0]))
            self._partial.clear()
            self._partial_bytes = 0
        events: list[ServerSentEvent] = []
        for line in lines:  # one event is about three lines: the loop is kept lean
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:  # the standard drops an event that has no data
                    self._event = ""
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                self._data_bytes += len(value) + 1
                if self._data_bytes > self._max_event_bytes:
                    raise EventStreamError(f"an event is over {self._max_event_bytes:,} bytes")
                self._data.append(value)
            else:
                self._field(line)
        if last:
            self._partial_bytes += len(last)
            if self._partial_bytes + self._data_bytes > self._max_event_bytes:
                raise EventStreamError(f"an event is over {self._max_event_bytes:,} bytes")
            self._partial.append(last)
        return events

    def _field(self, line: bytes) -> None:
        name, _, value = line.partition(b":")
        if name == b"data":  # `data` alone: an empty line of data
            self._data.append(b"")
            self._data_bytes += 1
        elif name == b"event":
            self._event = value.removeprefix(b" ").decode("utf-8", "replace")
        # Comments (an empty name: keep-alives), `id` and `retry` are for reconnecting
        # browsers; a model reply is never resumed, so they are read past.

    def _dispatch(self) -> ServerSentEvent:
        event = self._event or "message"
        data, self._data, self._data_bytes, self._event = self._data, [], 0, ""
        return ServerSentEvent(event, data[0] if len(data) == 1 else b"\n".join(data))

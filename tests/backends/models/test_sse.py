"""The Server-Sent Events framing: whole events out of bytes cut anywhere, bounded."""

from __future__ import annotations

import pytest

from noeta.backends.models.sse import EventStreamDecoder, EventStreamError, ServerSentEvent

STREAM = (
    "\ufeffevent: message_start\r\n"
    'data: {"a": "é"}\r\n'
    "\r\n"
    ": a comment, as a keep-alive\n"
    "id: 7\n"
    "retry: 100\n"
    "data: first line\n"
    "data:second line\n"
    "data\n"
    "\n"
    "event: ping\r"
    "data: {}\r"
    "\r"
    "event: only a name, no data\n"
    "\n"
    "data: 😀 end\n\n"
).encode()

EXPECTED = [
    ServerSentEvent("message_start", '{"a": "é"}'.encode()),
    ServerSentEvent("message", b"first line\nsecond line\n"),
    ServerSentEvent("ping", b"{}"),
    ServerSentEvent("message", "😀 end".encode()),
]


def feed_all(chunks: list[bytes], max_event_bytes: int = 1000) -> list[ServerSentEvent]:
    decoder = EventStreamDecoder(max_event_bytes)
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    assert not decoder.mid_event
    return events


def test_whole_stream_in_one_chunk() -> None:
    assert feed_all([STREAM]) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 5, 13])
def test_chunks_cut_inside_lines_line_ends_and_characters(size: int) -> None:
    chunks = [STREAM[start : start + size] for start in range(0, len(STREAM), size)]
    assert feed_all(chunks) == EXPECTED


def test_an_event_cut_short_is_not_given_and_is_seen_as_cut() -> None:
    decoder = EventStreamDecoder(1000)
    assert decoder.feed(b"event: message_stop\ndata: {}\n") == []
    assert decoder.mid_event
    line_only = EventStreamDecoder(1000)
    assert line_only.feed(b'data: {"type": "mess') == []
    assert line_only.mid_event


def test_a_line_without_end_is_bounded() -> None:
    decoder = EventStreamDecoder(100)
    decoder.feed(b"data: " + b"x" * 50)
    with pytest.raises(EventStreamError, match="over 100 bytes"):
        decoder.feed(b"x" * 60)


def test_an_event_of_many_lines_is_bounded() -> None:
    decoder = EventStreamDecoder(100)
    with pytest.raises(EventStreamError, match="over 100 bytes"):
        decoder.feed(b"data: 0123456789\n" * 11)


PLAIN = (
    b"event: message_start\ndata: {}\n\n"
    b"data: no name\n\n"
    b": a keep-alive between two events\n\n"
    b"event: \ndata: an empty name\n\n"
    b"event: two\ndata: lines\ndata: of data\n\n"
    b"\n\n\n"
    b"event: ping\ndata: {}\n\n"
    b"event: only a name\n\n"
    b"data: last\n\n"
)
PLAIN_EXPECTED = [
    ServerSentEvent("message_start", b"{}"),
    ServerSentEvent("message", b"no name"),
    ServerSentEvent("message", b"an empty name"),
    ServerSentEvent("two", b"lines\nof data"),
    ServerSentEvent("ping", b"{}"),
    ServerSentEvent("message", b"last"),
]


def test_lf_ended_events_read_a_block_at_a_time_are_read_as_line_by_line() -> None:
    """The block path (whole events in a chunk) and the line path agree, on events the
    first reads itself and those it hands to the second."""
    by_event = [event + b"\n\n" for event in PLAIN.split(b"\n\n")[:-1]]
    by_byte = [PLAIN[index : index + 1] for index in range(len(PLAIN))]
    for chunks in ([PLAIN], by_event, by_byte):
        assert feed_all([b"\n", *chunks]) == PLAIN_EXPECTED


def test_a_whole_event_over_the_bound_is_refused() -> None:
    decoder = EventStreamDecoder(100)
    decoder.feed(b"\n")
    with pytest.raises(EventStreamError, match="over 100 bytes"):
        decoder.feed(b"event: e\ndata: " + b"x" * 100 + b"\n\n")


def test_lf_ended_events_cut_anywhere_are_read_once_and_an_unended_one_held() -> None:
    for size in (2, 3, 5, 8, 13, 21):
        chunks = [b"\n"] + [PLAIN[start : start + size] for start in range(0, len(PLAIN), size)]
        assert feed_all(chunks) == PLAIN_EXPECTED
    decoder = EventStreamDecoder(1000)
    assert decoder.feed(b"\nevent: message_stop\n") == []
    assert decoder.feed(b"data: {}\n") == []
    assert decoder.mid_event
    assert decoder.feed(b"\n") == [ServerSentEvent("message_stop", b"{}")]
    assert not decoder.mid_event


def test_an_unended_event_held_is_bounded() -> None:
    decoder = EventStreamDecoder(100)
    decoder.feed(b"\ndata: " + b"x" * 60)
    with pytest.raises(EventStreamError, match="over 100 bytes"):
        decoder.feed(b"x" * 50)

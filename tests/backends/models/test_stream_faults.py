"""A stream that goes wrong fails the call as the same fault would without streaming, and
is retried (or not) by the same rules; reading it stays bounded and off the event loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from noeta.backends.models import wire as wire_module
from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.openai import OpenAIProvider
from noeta.core.ports.model import ReplyDelta, Text, TextDelta, ToolCall
from noeta.core.retry import ModelCallFailed, send_with_retries
from noeta.testing.fake_providers import FakeAnthropic, RawBody, RawStream, Reply
from tests.backends.models.sample_requests import API_KEY, conversation
from tests.backends.models.stream_wires import Wire, wire, wires

__all__ = ["wire", "wires"]  # fixtures

REPLY = Reply(text="Let me look at the files.", tool_calls=(ToolCall("c1", "Bash", {"a": 1}),))


def events(wire: Wire) -> list[bytes]:
    return wire.server.stream_of(REPLY)


def broken_json(event: bytes) -> bytes:
    """The event with its JSON's last brace gone."""
    assert event.endswith(b"}\n\n")
    return event[:-3] + b"\n\n"


async def no_sleep(seconds: float) -> None:
    return None


async def test_a_stream_ended_in_the_middle_of_an_event_is_retryable(wire: Wire) -> None:
    parts = events(wire)
    wire.server.script(RawStream((*parts[:4], parts[4][:20])))
    error = await wire.failure()
    assert (error.retryable, error.status) == (True, 200)
    assert error.reason == "malformed reply (HTTP 200)"
    assert "stopped in the middle of an event" in str(error)


async def test_a_connection_dropped_mid_stream_is_retryable(wire: Wire) -> None:
    parts = events(wire)
    wire.server.script(RawStream((*parts[:4], parts[4][:20]), end="drop"))
    error = await wire.failure()
    assert (error.retryable, error.status) == (True, None)
    assert error.reason.startswith("connection failed (")


async def test_malformed_json_in_a_delta_is_retryable(wire: Wire) -> None:
    parts = events(wire)
    wire.server.script(RawStream((*parts[:3], broken_json(parts[3]), *parts[4:])))
    error = await wire.failure()
    assert (error.retryable, error.status) == (True, 200)
    assert error.reason == "malformed reply (HTTP 200)"
    assert "event is not JSON" in str(error)


@pytest.mark.parametrize(("status", "retryable"), [(400, False), (429, True), (500, True)])
async def test_an_error_event_fails_as_its_status_would(
    wire: Wire, status: int, retryable: bool
) -> None:
    parts = events(wire)
    wire.server.script(RawStream((*parts[:4], wire.server.error_event(status))))
    error = await wire.failure()
    assert (error.retryable, error.status) == (retryable, status)
    assert error.reason.startswith("error event (") and "fake" not in error.reason
    assert "fake" in str(error)  # the provider's own message, as for a status


async def test_an_overloaded_event_is_the_529_it_would_have_been() -> None:
    with FakeAnthropic() as server:
        provider = AnthropicProvider(API_KEY, base_url=server.base_url)
        parts = server.stream_of(REPLY)
        server.script(RawStream((*parts[:4], server.error_event(529))))
        try:
            with pytest.raises(Exception) as caught:
                await provider.send(provider.encode_request(conversation()))
        finally:
            await provider.close()
    error = caught.value
    assert (getattr(error, "status", None), getattr(error, "retryable", None)) == (529, True)
    assert getattr(error, "reason", "") == "error event (overloaded_error)"


async def test_a_stream_that_never_sends_its_usage_and_stop_is_retryable(wire: Wire) -> None:
    # Anthropic: no message_delta nor message_stop; OpenAI: no usage chunk nor [DONE].
    parts = events(wire)
    wire.server.script(RawStream(tuple(parts[:-2])))
    error = await wire.failure()
    assert (error.retryable, error.status) == (True, 200)
    assert "the stream ended before" in str(error)


async def test_a_stream_without_its_stop_reason_is_retryable(wire: Wire) -> None:
    # Anthropic: message_stop without message_delta; OpenAI: no chunk with finish_reason.
    parts = events(wire)
    stop = -2 if isinstance(wire.server, FakeAnthropic) else -3
    wire.server.script(RawStream((*parts[:stop], *parts[stop + 1 :])))
    error = await wire.failure()
    assert (error.retryable, error.status) == (True, 200)
    field = "'stop_reason'" if isinstance(wire.server, FakeAnthropic) else "'finish_reason'"
    assert f"malformed reply: {field} is missing" in str(error)


async def test_a_stream_that_stalls_times_out_and_is_retryable(wire: Wire) -> None:
    parts = events(wire)
    wire.server.script(RawStream(tuple(parts[:5]), end="stall"))
    provider: AnthropicProvider | OpenAIProvider
    if isinstance(wire.provider, AnthropicProvider):
        provider = AnthropicProvider(API_KEY, base_url=wire.server.base_url, timeout_seconds=0.2)
    else:
        provider = OpenAIProvider(API_KEY, base_url=wire.server.base_url, timeout_seconds=0.2)
    deltas: list[ReplyDelta] = []
    try:
        with pytest.raises(Exception) as caught:
            await provider.send(wire.stream_body(), deltas.append)
    finally:
        await provider.close()
    assert getattr(caught.value, "retryable", None) is True
    assert getattr(caught.value, "reason", "") == "timeout (ReadTimeout)"


@pytest.mark.parametrize("streamed", [True, False])
async def test_a_reply_over_the_cap_fails_and_is_not_retried(
    wire: Wire, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire_module, "MAX_REPLY_BYTES", 4000)
    wire.server.script(Reply(text="word " * 1000))
    body = wire.stream_body() if streamed else wire.whole_body()
    with pytest.raises(Exception) as caught:
        await wire.provider.send(body)
    error = caught.value
    assert (getattr(error, "retryable", None), getattr(error, "reason", "")) == (
        False,
        "reply too large",
    )
    assert "over 4,000 bytes" in str(error)


async def test_a_line_without_end_is_bounded(wire: Wire, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_module, "MAX_EVENT_BYTES", 1000)
    wire.server.script(RawStream((b"data: {" + b'"x": 1, ' * 500,), end="stall"))
    error = await wire.failure()
    assert (error.retryable, error.reason) == (True, "malformed reply (HTTP 200)")
    assert "an event is over 1,000 bytes" in str(error)


async def test_large_events_and_replies_are_decoded_off_the_event_loop(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    ran: dict[str, int] = {}
    real_to_thread = asyncio.to_thread

    async def to_thread(function: Callable[..., Any], /, *args: Any) -> Any:
        def run() -> Any:
            ran[function.__name__] = threading.get_ident()
            return function(*args)

        return await real_to_thread(run)

    monkeypatch.setattr(wire_module.asyncio, "to_thread", to_thread)
    text = "x" * (wire_module.INLINE_DECODE_BYTES + 1)
    wire.server.script(Reply(text=text, piece_chars=len(text)))
    reply = await wire.provider.send(wire.stream_body())
    assert reply.content[0] == Text(text)
    # The one large event, then the reply built from the stream (a lambda), each on a thread.
    assert {"take", "<lambda>"} <= ran.keys()
    assert loop_thread not in (ran["take"], ran["<lambda>"])


async def test_a_server_that_does_not_stream_is_read_whole(wire: Wire) -> None:
    # Some compatible servers answer a stream request with the whole reply.
    wire.server.script(REPLY)
    whole = await wire.provider.send(wire.whole_body())
    document = wire.server.render_reply(REPLY, "test-model", 1)
    wire.server.script(RawBody(json.dumps(document).encode()))
    assert await wire.provider.send(wire.stream_body()) == whole


async def test_a_failed_attempt_is_retried_and_the_deltas_say_which_attempt(wire: Wire) -> None:
    parts = events(wire)
    wire.server.script(RawStream((*parts[:5], wire.server.error_event(500))), REPLY)
    heard: list[tuple[int, ReplyDelta]] = []
    reply = await send_with_retries(
        wire.provider,
        wire.stream_body(),
        no_sleep,
        on_delta=lambda attempt, delta: heard.append((attempt, delta)),
    )
    assert len(wire.server.requests) == 2
    assert wire.server.requests[0].body == wire.server.requests[1].body  # the same bytes
    assert {attempt for attempt, _ in heard} == {1, 2}
    assert [attempt for attempt, _ in heard] == sorted(attempt for attempt, _ in heard)
    second = "".join(d.text for a, d in heard if a == 2 and isinstance(d, TextDelta))
    assert second == REPLY.text
    assert reply.content[0] == Text(second)


async def test_an_error_event_no_retry_can_fix_is_not_retried(wire: Wire) -> None:
    parts = events(wire)
    wire.server.script(RawStream((*parts[:5], wire.server.error_event(400))), REPLY)
    with pytest.raises(ModelCallFailed) as caught:
        await send_with_retries(wire.provider, wire.stream_body(), no_sleep)
    assert caught.value.attempts == 1
    assert len(wire.server.requests) == 1

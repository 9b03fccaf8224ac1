"""Both adapters stream every reply: at the wire, against fakes that speak each API's
streaming format, the reply read from a stream is the one the same answer gives whole."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.anthropic_stream import MessageStream
from noeta.backends.models.openai import OpenAIProvider
from noeta.backends.models.sse import ServerSentEvent
from noeta.backends.models.wire import MalformedReply
from noeta.core.ports.model import (
    ModelReply,
    ReplyDelta,
    Text,
    TextDelta,
    ToolCall,
    ToolInputDelta,
)
from noeta.testing.fake_providers import Reply
from tests.backends.models.sample_requests import API_KEY, conversation
from tests.backends.models.stream_wires import Wire, wire, wires

__all__ = ["wire", "wires"]  # fixtures

CALLS = (
    ToolCall("call_1", "Bash", {"command": 'grep -n "é\\\\d" ~/src/*.py | head'}),
    ToolCall("call_2", "Write", {"path": "a.txt", "text": "😀 line\n\tnext", "n": [1, 2.5]}),
    ToolCall("call_3", "Now", {}),
)

REPLIES = {
    "text": Reply(text="Hello there: the files are listed below. Café ✓ 😀", output_tokens=17),
    "tool calls": Reply(text=None, tool_calls=CALLS, input_tokens=3, output_tokens=40),
    "text and calls": Reply(text="Let me look.", tool_calls=CALLS[:2], cache_read_tokens=900),
    "blank text before a call": Reply(text="\n\n", tool_calls=CALLS[:1]),
    "empty": Reply(text=None),
    "cut at max tokens": Reply(text="Partial answ", stop_reason="max_tokens"),
    "cached": Reply(text="ok", input_tokens=5, cache_read_tokens=1000, cache_write_tokens=200),
}


def joined(deltas: list[ReplyDelta]) -> tuple[dict[int, str], dict[str, str]]:
    """The text of each block, and the input of each tool call, as the deltas build them."""
    texts: dict[int, str] = {}
    inputs: dict[str, str] = {}
    for delta in deltas:
        if isinstance(delta, TextDelta):
            texts[delta.block] = texts.get(delta.block, "") + delta.text
        else:
            inputs[delta.call_id] = inputs.get(delta.call_id, "") + delta.fragment
    return texts, inputs


def assert_deltas_build(reply: ModelReply, deltas: list[ReplyDelta]) -> None:
    texts, inputs = joined(deltas)
    kept = [block.text for block in reply.content if isinstance(block, Text)]
    assert [text for text in texts.values() if text.strip()] == kept
    calls = {block.id: block.input for block in reply.content if isinstance(block, ToolCall)}
    built = {call_id: json.loads(text) for call_id, text in inputs.items()}
    assert built == {call_id: calls[call_id] for call_id in built}
    assert all(not calls[call_id] for call_id in calls.keys() - built.keys())


@pytest.mark.parametrize("name", list(REPLIES))
@pytest.mark.parametrize("chunk_bytes", [None, 7])
async def test_a_streamed_reply_equals_the_reply_sent_whole(
    wire: Wire, name: str, chunk_bytes: int | None
) -> None:
    wire.server.chunk_bytes = chunk_bytes  # 7: writes cut inside lines and characters
    wire.server.script(REPLIES[name], REPLIES[name])
    deltas: list[ReplyDelta] = []
    streamed = await wire.provider.send(wire.stream_body(), deltas.append)
    whole = await wire.provider.send(wire.whole_body())
    # The fake numbers its answers: the response id is the one thing meant to differ.
    assert streamed == replace(whole, response_id=streamed.response_id)
    assert streamed.response_id[-1] == "1" and whole.response_id[-1] == "2"
    assert len(wire.server.first_bytes) == 1  # the first was streamed, the second not
    assert_deltas_build(streamed, deltas)


async def test_tool_arguments_come_in_fragments_cut_inside_escapes(wire: Wire) -> None:
    wire.server.script(Reply(text=None, tool_calls=CALLS))
    deltas: list[ReplyDelta] = []
    reply = await wire.provider.send(wire.stream_body(), deltas.append)
    fragments = [delta for delta in deltas if isinstance(delta, ToolInputDelta)]
    assert len(fragments) > 20
    assert any(fragment.fragment.endswith("\\") for fragment in fragments)
    assert {(delta.call_id, delta.name) for delta in fragments} == {
        ("call_1", "Bash"),
        ("call_2", "Write"),
        ("call_3", "Now"),
    }
    assert reply.content == CALLS


async def test_without_a_hook_the_reply_is_the_same(wire: Wire) -> None:
    reply = Reply(text="Same either way.", tool_calls=CALLS[:1])
    wire.server.script(reply, reply)
    told: list[ReplyDelta] = []
    heard = await wire.provider.send(wire.stream_body(), told.append)
    unheard = await wire.provider.send(wire.stream_body())
    assert unheard == replace(heard, response_id=unheard.response_id)
    assert told


def test_the_request_asks_for_a_stream_and_stays_the_same_bytes() -> None:
    for provider in (AnthropicProvider(API_KEY), OpenAIProvider(API_KEY)):
        body = provider.encode_request(conversation())
        assert body == provider.encode_request(conversation())
        assert json.loads(body)["stream"] is True
    openai = json.loads(OpenAIProvider(API_KEY).encode_request(conversation()))
    assert openai["stream_options"] == {"include_usage": True}


def test_the_whole_form_is_the_streamed_one_without_its_stream_keys() -> None:
    """The form releases before streaming sent, to the byte: what a re-send of a request
    they recorded must be (SPEC §4)."""
    for provider in (AnthropicProvider(API_KEY), OpenAIProvider(API_KEY)):
        streamed = json.loads(provider.encode_request(conversation()))
        whole = provider.encode_request(conversation(), stream=False)
        streamed.pop("stream")
        streamed.pop("stream_options", None)
        assert whole == json.dumps(streamed, ensure_ascii=False, separators=(",", ":")).encode()


def test_an_anthropic_text_delta_is_read_alike_from_its_bytes_or_as_json() -> None:
    """The compact form with a text JSON needs no escape for is read without decoding
    JSON; escaped, spaced or aimed at a block that is no text, it is decoded as JSON:
    the same text either way, told as it came."""
    texts = ["plain é😀", 'a "quote"', "a \\ back", "line\nend", "", "ascii é"]
    data = [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
        for t in texts
    ]
    forms = [json.dumps(d, ensure_ascii=False, separators=(",", ":")) for d in data]
    forms.append(json.dumps(data[0]))  # spaced
    forms.append(json.dumps(data[5], separators=(",", ":")))  # ASCII escapes
    stream = MessageStream(tell=True)
    start = {"type": "message_start", "message": {"id": "m", "role": "assistant", "usage": {}}}
    stream.take(ServerSentEvent("message_start", json.dumps(start).encode()))
    for index, block in enumerate([{"type": "text", "text": ""}, {"type": "tool_use"}]):
        begun = {"type": "content_block_start", "index": index, "content_block": block}
        stream.take(ServerSentEvent("content_block_start", json.dumps(begun).encode()))
    told = [stream.take(ServerSentEvent("content_block_delta", f.encode())) for f in forms]
    not_text = '{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}'
    assert stream.take(ServerSentEvent("content_block_delta", not_text.encode())) == ()
    stream.take(ServerSentEvent("message_stop", b'{"type":"message_stop"}'))
    expected = [*texts, texts[0], texts[5]]
    text, tool = stream.document()["content"]  # type: ignore[misc]
    assert (text, tool) == ({"type": "text", "text": "".join(expected)}, {"type": "tool_use"})
    assert [[d.text for d in deltas if isinstance(d, TextDelta)] for deltas in told] == [
        [text] if text else [] for text in expected
    ]
    broken = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\xff"}}'
    with pytest.raises(MalformedReply, match="not JSON"):
        stream.take(ServerSentEvent("content_block_delta", broken))

"""Streams written as each API's documentation shows them (not as our fakes render them),
and the variants other servers send, read into the reply they stand for."""

from __future__ import annotations

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.openai import OpenAIProvider
from noeta.core.ports.model import ModelReply, ReplyDelta, Text, TextDelta, ToolCall, Usage
from noeta.testing.fake_providers import FakeAnthropic, FakeOpenAI, RawStream
from tests.backends.models.sample_requests import API_KEY, conversation

ANTHROPIC_STREAM = b"""event: message_start
data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", \
"type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", \
"stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, \
"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use",\
"id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",\
"partial_json":"{\\"location\\": \\"San Fra"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",\
"partial_json":"ncisco, CA\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence":null}, \
"usage": {"output_tokens": 15}}

event: message_stop
data: {"type": "message_stop"}

"""

OPENAI_STREAM = b"""data: {"id":"chatcmpl-123","object":"chat.completion.chunk",\
"created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":\
{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,\
"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,\
"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,\
"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather",\
"arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":\
{"arguments":"{\\"location\\": \\"San Fra"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":\
{"arguments":"ncisco, CA\\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"logprobs":null,\
"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,\
"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":80,"completion_tokens":17,\
"total_tokens":97,"prompt_tokens_details":{"cached_tokens":64}}}

data: [DONE]

"""

WEATHER = ToolCall("", "get_weather", {"location": "San Francisco, CA"})


async def read(provider: AnthropicProvider | OpenAIProvider) -> tuple[ModelReply, str]:
    deltas: list[ReplyDelta] = []
    try:
        reply = await provider.send(provider.encode_request(conversation()), deltas.append)
    finally:
        await provider.close()
    return reply, "".join(delta.text for delta in deltas if isinstance(delta, TextDelta))


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
async def test_the_anthropic_example(line_end: bytes) -> None:
    with FakeAnthropic() as server:
        server.script(RawStream((ANTHROPIC_STREAM.replace(b"\n", line_end),)))
        reply, text = await read(AnthropicProvider(API_KEY, base_url=server.base_url))
    assert text == "Hello!"
    assert reply == ModelReply(
        content=(Text("Hello!"), ToolCall("toolu_01T1x1fJ34qAmk2tNTrN7Up6", **_weather())),
        stop_reason="tool_use",
        usage=Usage(input_tokens=25, output_tokens=15),
        provider_stop_reason="tool_use",
        response_id="msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
    )


async def test_anthropic_totals_in_message_delta_replace_those_of_message_start() -> None:
    # Newer API versions give the input and cache counts again, at the end; null is unsaid.
    usage = b'"usage": {"output_tokens": 15}'
    totals = (
        b'"usage": {"input_tokens": 30, "cache_read_input_tokens": 1000, '
        b'"cache_creation_input_tokens": null, "output_tokens": 16}'
    )
    with FakeAnthropic() as server:
        server.script(RawStream((ANTHROPIC_STREAM.replace(usage, totals),)))
        reply, _ = await read(AnthropicProvider(API_KEY, base_url=server.base_url))
    assert reply.usage == Usage(input_tokens=30, output_tokens=16, cache_read_tokens=1000)


async def test_the_openai_example() -> None:
    with FakeOpenAI() as server:
        server.script(RawStream((OPENAI_STREAM,)))
        reply, text = await read(OpenAIProvider(API_KEY, base_url=server.base_url))
    assert text == "Hello!"
    assert reply == ModelReply(
        content=(Text("Hello!"), ToolCall("call_DdmO9pD3xa9XTPNJ32zg2hcA", **_weather())),
        stop_reason="tool_use",
        usage=Usage(input_tokens=16, output_tokens=17, cache_read_tokens=64),
        provider_stop_reason="tool_calls",
        response_id="chatcmpl-123",
    )


async def test_openai_compatible_variants() -> None:
    # vLLM ends with a usage chunk whose choices are null; a server that ignores
    # stream_options sends no usage at all, as a non-streamed reply may omit it.
    variant = OPENAI_STREAM.replace(b'"choices":[],"usage"', b'"choices":null,"usage"')
    without_usage = b"\n\n".join(
        event for event in OPENAI_STREAM.split(b"\n\n") if b'"prompt_tokens"' not in event
    )
    with FakeOpenAI() as server:
        server.script(RawStream((variant,)), RawStream((without_usage,)))
        provider = OpenAIProvider(API_KEY, base_url=server.base_url)
        body = provider.encode_request(conversation())
        try:
            with_null_choices = await provider.send(body)
            unreported = await provider.send(body)
        finally:
            await provider.close()
    assert with_null_choices.usage == Usage(input_tokens=16, output_tokens=17, cache_read_tokens=64)
    assert unreported.usage is None  # unknown, never 0 (issue 32)
    assert unreported.content == with_null_choices.content


def _weather() -> dict[str, object]:
    return {"name": WEATHER.name, "input": WEATHER.input}

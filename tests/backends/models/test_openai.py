"""The OpenAI adapter against a local server that speaks Chat Completions; a server that
refuses `stream_options` is sent the request whole instead, once, and whole from then on
(ADR-0111)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest

from noeta.backends.models.openai import OpenAIProvider
from noeta.core.errors import ConfigError
from noeta.core.ports.model import (
    Message,
    ModelReply,
    ProviderError,
    ReplyDelta,
    Text,
    ToolCall,
    ToolResult,
    Usage,
)
from noeta.testing.fake_providers import Drop, FakeOpenAI, HttpError, RawBody, Reply, Stall
from tests.backends.models.sample_requests import (
    API_KEY,
    assert_keeps_key_secret,
    conversation,
    unused_port,
)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeOpenAI) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(API_KEY, base_url=server.base_url)
    yield provider
    await provider.close()


async def failure(provider: OpenAIProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.send(provider.encode_request(conversation()))
    assert_keeps_key_secret(caught.value)
    return caught.value


def completion(message: dict[str, object], finish_reason: str = "stop") -> bytes:
    choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    return json.dumps({"id": "chatcmpl-1", "choices": [choice]}).encode()


async def test_the_request_is_a_chat_completions_call(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    body = provider.encode_request(conversation())
    await provider.send(body)
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.body == body
    assert request.json() == {
        "model": "test-model",
        "max_tokens": 1024,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "description": "Run a shell command.",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                        "required": ["command"],
                    },
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "Read",
                    "description": "Read a file.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}, "limit": {"default": 0.1}},
                    },
                },
            },
        ],
        "messages": [
            {"role": "system", "content": "You are terse. Café ✓"},
            {"role": "user", "content": "List the files, then read README.md."},
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [
                    {
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"command":"ls"}'},
                    },
                    {
                        "id": "call-2",
                        "type": "function",
                        "function": {
                            "name": "Read",
                            "arguments": '{"path":"README.md","limit":0.1}',
                        },
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call-1", "content": "README.md\nsrc"},
            {"role": "tool", "tool_call_id": "call-2", "content": "Error: no such file"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_text_beside_tool_results_follows_them_and_calls_alone_have_null_content() -> None:
    messages = (
        Message("user", (Text("Go."),)),
        Message("assistant", (ToolCall("c1", "Bash", {}),)),
        Message("user", (Text("Also this."), ToolResult("c1", "done"))),
    )
    request = replace(conversation(), system="", tools=(), messages=messages)
    document = json.loads(OpenAIProvider(API_KEY).encode_request(request))
    assert "tools" not in document
    assert [message["role"] for message in document["messages"]] == [
        "user",
        "assistant",
        "tool",
        "user",
    ]
    assert document["messages"][1]["content"] is None


def test_the_same_request_always_gives_the_same_bytes() -> None:
    provider = OpenAIProvider(API_KEY)
    first = provider.encode_request(conversation())
    assert provider.encode_request(conversation()) == first
    assert OpenAIProvider("another-key").encode_request(conversation()) == first
    surrogates = replace(conversation(), system="bad \udcff byte")
    body = provider.encode_request(surrogates)
    assert body == provider.encode_request(surrogates)
    assert "bad \ufffd byte" in body.decode("utf-8")


async def test_text_tool_calls_and_usage_are_parsed(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    call = ToolCall("call_abc", "Bash", {"command": "ls -la"})
    server.script(
        Reply(
            text="Let me look.",
            tool_calls=(call,),
            input_tokens=12,
            output_tokens=34,
            cache_read_tokens=1024,
        )
    )
    reply = await provider.send(provider.encode_request(conversation()))
    assert reply == ModelReply(
        content=(Text("Let me look."), call),
        stop_reason="tool_use",
        # The wire says prompt_tokens=1036; noeta counts the uncached ones, as Anthropic does.
        usage=Usage(input_tokens=12, output_tokens=34, cache_read_tokens=1024),
        provider_stop_reason="tool_calls",
        response_id="chatcmpl-fake-1",
    )


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("stop", "end_turn"),
        ("tool_calls", "tool_use"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("something_new", "other"),
    ],
)
async def test_finish_reasons_map_to_noeta_words(
    server: FakeOpenAI, provider: OpenAIProvider, wire: str, expected: str
) -> None:
    server.script(Reply(stop_reason=wire))
    reply = await provider.send(provider.encode_request(conversation()))
    assert (reply.stop_reason, reply.provider_stop_reason) == (expected, wire)


async def test_tool_calls_mean_tool_use_even_when_the_server_says_stop(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    server.script(Reply(tool_calls=(ToolCall("c1", "Bash", {}),), stop_reason="stop"))
    reply = await provider.send(provider.encode_request(conversation()))
    assert reply.stop_reason == "tool_use"


async def test_a_refusal_is_a_refusal(server: FakeOpenAI, provider: OpenAIProvider) -> None:
    server.script(RawBody(completion({"content": None, "refusal": "I can't help with that."})))
    reply = await provider.send(provider.encode_request(conversation()))
    assert (reply.content, reply.stop_reason) == ((Text("I can't help with that."),), "refusal")


async def test_tool_arguments_that_are_not_json_are_retryable(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"comm'}}
    server.script(RawBody(completion({"content": None, "tool_calls": [call]}, "tool_calls")))
    error = await failure(provider)
    assert error.retryable
    assert "the model returned tool arguments that are not valid JSON" in str(error)


async def test_rate_limit_is_retryable_after_the_time_asked(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    server.script(
        HttpError(429, retry_after="2.5"), HttpError(429, headers={"retry-after-ms": "800"})
    )
    error = await failure(provider)
    assert (error.retryable, error.status, error.retry_after) == (True, 429, 2.5)
    assert (await failure(provider)).retry_after == 0.8


@pytest.mark.parametrize("status", [408, 409, 500, 503])
async def test_server_errors_are_retryable(
    server: FakeOpenAI, provider: OpenAIProvider, status: int
) -> None:
    server.script(HttpError(status))
    error = await failure(provider)
    assert (error.retryable, error.status) == (True, status)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
async def test_request_errors_are_not_retryable(
    server: FakeOpenAI, provider: OpenAIProvider, status: int
) -> None:
    server.script(HttpError(status))
    error = await failure(provider)
    assert (error.retryable, error.status) == (False, status)


async def test_a_key_the_server_quotes_back_is_redacted(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    server.script(HttpError(401))
    error = await failure(provider)
    assert "Incorrect API key provided: [redacted]" in str(error)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"id": "chatcmpl-1", "choices": [{"index": 0, "mess',
        b"",
        b'{"id": "chatcmpl-1", "choices": []}',
        b'{"error": {"message": "upstream failed"}}',
        completion({"content": 42}),
    ],
)
async def test_a_malformed_reply_is_retryable(
    server: FakeOpenAI, provider: OpenAIProvider, body: bytes
) -> None:
    server.script(RawBody(body))
    error = await failure(provider)
    assert (error.retryable, error.status) == (True, 200)


async def test_a_dropped_connection_is_retryable(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    server.script(Drop())
    error = await failure(provider)
    assert (error.retryable, error.status) == (True, None)
    assert len(server.requests) == 1


async def test_a_timeout_is_retryable(server: FakeOpenAI) -> None:
    provider = OpenAIProvider(API_KEY, base_url=server.base_url, timeout_seconds=0.2)
    server.script(Stall())
    error = await failure(provider)
    await provider.close()
    assert error.retryable


async def test_a_refused_connection_is_retryable() -> None:
    provider = OpenAIProvider(API_KEY, base_url=f"http://127.0.0.1:{unused_port()}/v1")
    error = await failure(provider)
    await provider.close()
    assert (error.retryable, error.status) == (True, None)


def test_openai_itself_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        OpenAIProvider.from_environment({})
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        OpenAIProvider.from_environment({"OPENAI_BASE_URL": "https://eu.api.openai.com/v1"})
    with pytest.raises(ConfigError):
        OpenAIProvider(None)


async def test_a_self_hosted_server_needs_no_key(server: FakeOpenAI) -> None:
    provider = OpenAIProvider.from_environment({"OPENAI_BASE_URL": server.base_url})
    await provider.send(provider.encode_request(conversation()))
    await provider.close()
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1"])
async def test_reasoning_models_get_max_completion_tokens(
    server: FakeOpenAI, provider: OpenAIProvider, model: str
) -> None:
    # The fake answers `max_tokens` for these models with OpenAI's own 400.
    reply = await provider.send(provider.encode_request(replace(conversation(), model=model)))
    assert reply.content == (Text("Hello from the fake model."),)
    sent = server.requests[-1].json()
    assert sent["max_completion_tokens"] == conversation().max_tokens and "max_tokens" not in sent


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4.1-mini", "llama3.1:8b", "omni-moderation"])
async def test_other_models_keep_max_tokens(
    server: FakeOpenAI, provider: OpenAIProvider, model: str
) -> None:
    # Servers that speak this API (vLLM, Ollama) may know only `max_tokens`.
    await provider.send(provider.encode_request(replace(conversation(), model=model)))
    sent = server.requests[-1].json()
    assert sent["max_tokens"] == conversation().max_tokens
    assert "max_completion_tokens" not in sent


async def test_blank_text_beside_tool_calls_is_not_kept(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    call = ToolCall("call_abc", "Bash", {"command": "ls"})
    server.script(Reply(text=" \n", tool_calls=(call,)))
    reply = await provider.send(provider.encode_request(conversation()))
    assert reply.content == (call,)


async def test_a_server_refusing_stream_options_gets_the_request_whole_once_and_after(
    server: FakeOpenAI, provider: OpenAIProvider, caplog: pytest.LogCaptureFixture
) -> None:
    server.refuses_stream_options = True
    server.script(Reply(text="first", input_tokens=12), Reply(text="second", input_tokens=13))
    told: list[ReplyDelta] = []
    caplog.set_level(logging.WARNING, logger="noeta.backends.models.openai")
    first = await provider.send(provider.encode_request(conversation()), told.append)
    assert first.content == (Text("first"),)
    assert first.usage == Usage(input_tokens=12, output_tokens=5)  # exact: from the body
    refused, resent = server.requests
    assert json.loads(refused.body)["stream_options"] == {"include_usage": True}
    assert resent.body == provider.encode_request(conversation(), stream=False)
    # From now on the provider encodes the whole form: what its ModelCalled records is
    # what it sends, and no request is refused first.
    body = provider.encode_request(conversation())
    assert body == resent.body
    second = await provider.send(body)
    assert second.content == (Text("second"),) and len(server.requests) == 3
    assert told == []  # a whole reply is not told in pieces
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        f"{provider.base_url} refuses stream_options: its model calls are sent whole"
        " from now on (their replies are not streamed)"
    ]


async def test_another_400_is_not_resent_and_a_failed_resend_is_not_remembered(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    server.script(HttpError(400))  # a refusal for another reason
    with pytest.raises(ProviderError) as caught:
        await provider.send(provider.encode_request(conversation()))
    assert caught.value.status == 400 and len(server.requests) == 1
    server.refuses_stream_options = True
    server.script(HttpError(503))
    with pytest.raises(ProviderError) as caught:
        await provider.send(provider.encode_request(conversation()))
    assert_keeps_key_secret(caught.value)
    assert caught.value.status == 503 and caught.value.retryable
    assert len(server.requests) == 3  # refused, then resent whole once
    assert b"stream_options" in provider.encode_request(conversation())  # not learnt

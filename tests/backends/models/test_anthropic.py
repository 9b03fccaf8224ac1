"""The Anthropic adapter against a local server that speaks the Messages API."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.core.errors import ConfigError
from noeta.core.ports import payload
from noeta.core.ports.model import (
    Message,
    ModelReply,
    ProviderError,
    Text,
    ToolCall,
    ToolSpec,
    Usage,
)
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.request import build_request
from noeta.testing.fake_providers import Drop, FakeAnthropic, HttpError, RawBody, Reply, Stall
from tests.backends.models.sample_requests import (
    API_KEY,
    assert_keeps_key_secret,
    conversation,
    unused_port,
)

BREAKPOINT = {"type": "ephemeral"}


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    provider = AnthropicProvider(API_KEY, base_url=server.base_url)
    yield provider
    await provider.close()


async def failure(provider: AnthropicProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.send(provider.encode_request(conversation()))
    assert_keeps_key_secret(caught.value)
    return caught.value


async def test_the_request_is_a_messages_api_call(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    body = provider.encode_request(conversation())
    await provider.send(body)
    [request] = server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert request.body == body
    assert request.json() == {
        "model": "test-model",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are terse. Café ✓", "cache_control": BREAKPOINT}],
        "tools": [
            {
                "name": "Bash",
                "description": "Run a shell command.",
                "input_schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            },
            {
                "name": "Read",
                "description": "Read a file.",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "limit": {"default": 0.1}},
                },
                "cache_control": BREAKPOINT,
            },
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "List the files, then read README.md.",
                        "cache_control": BREAKPOINT,
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "call-1",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call-2",
                        "name": "Read",
                        "input": {"path": "README.md", "limit": 0.1},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call-1", "content": "README.md\nsrc"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call-2",
                        "content": "no such file",
                        "is_error": True,
                        "cache_control": BREAKPOINT,
                    },
                ],
            },
        ],
        "stream": True,
    }


def test_a_first_request_has_three_breakpoints_and_a_long_one_four() -> None:
    provider = AnthropicProvider(API_KEY)
    first = replace(conversation(), messages=conversation().messages[:1])
    assert provider.encode_request(first).count(b'"cache_control"') == 3
    turn = conversation().messages[1:]
    long = replace(conversation(), messages=conversation().messages + turn * 5)
    assert provider.encode_request(long).count(b'"cache_control"') == 4


def test_without_system_prompt_or_tools_only_messages_are_marked() -> None:
    request = replace(conversation(), system="", tools=())
    body = AnthropicProvider(API_KEY).encode_request(request)
    document = payload.decode(body.decode("utf-8"))
    assert isinstance(document, dict)
    assert "system" not in document
    assert "tools" not in document
    assert body.count(b'"cache_control"') == 2


def test_the_same_request_always_gives_the_same_bytes() -> None:
    provider = AnthropicProvider(API_KEY)
    request = conversation()
    first = provider.encode_request(request)
    assert provider.encode_request(request) == first
    assert provider.encode_request(conversation()) == first
    assert AnthropicProvider("another-key").encode_request(conversation()) == first
    # As after a crash: the request rebuilt from what the log holds.
    tools = tuple(
        ToolSpec(tool.name, tool.description, _through_the_log(tool.input_schema))
        for tool in request.tools
    )
    messages = tuple(
        Message(
            message.role,
            tuple(
                ToolCall(block.id, block.name, _through_the_log(block.input))
                if isinstance(block, ToolCall)
                else block
                for block in message.content
            ),
        )
        for message in request.messages
    )
    assert provider.encode_request(replace(request, tools=tools, messages=messages)) == first
    assert first.decode("utf-8").count("Café ✓") == 1  # UTF-8, not \u escapes


def test_lone_surrogates_become_replacement_characters() -> None:
    provider = AnthropicProvider(API_KEY)
    bad_output = b"ok \xff\xfe done".decode("utf-8", errors="surrogateescape")
    request = replace(conversation(), system=bad_output)
    body = provider.encode_request(request)
    assert body == provider.encode_request(request)
    assert "ok \ufffd\ufffd done" in body.decode("utf-8")


async def test_text_tool_calls_and_usage_are_parsed(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    call = ToolCall("toolu_1", "Bash", {"command": "ls -la"})
    server.script(
        Reply(
            text="Let me look.",
            tool_calls=(call,),
            input_tokens=12,
            output_tokens=34,
            cache_read_tokens=1000,
            cache_write_tokens=200,
        )
    )
    reply = await provider.send(provider.encode_request(conversation()))
    assert reply == ModelReply(
        content=(Text("Let me look."), call),
        stop_reason="tool_use",
        usage=Usage(
            input_tokens=12, output_tokens=34, cache_read_tokens=1000, cache_write_tokens=200
        ),
        provider_stop_reason="tool_use",
        response_id="msg_fake_1",
    )


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("refusal", "refusal"),
        ("pause_turn", "other"),
    ],
)
async def test_stop_reasons_map_to_noeta_words(
    server: FakeAnthropic, provider: AnthropicProvider, wire: str, expected: str
) -> None:
    server.script(Reply(stop_reason=wire))
    reply = await provider.send(provider.encode_request(conversation()))
    assert (reply.stop_reason, reply.provider_stop_reason) == (expected, wire)


async def test_an_empty_reply_is_a_reply(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    server.script(Reply(text=None))
    reply = await provider.send(provider.encode_request(conversation()))
    assert (reply.content, reply.stop_reason) == ((), "end_turn")


async def test_rate_limit_is_retryable_after_the_time_asked(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    server.script(HttpError(429, retry_after="7"))
    error = await failure(provider)
    assert (error.retryable, error.status, error.retry_after) == (True, 429, 7.0)
    assert "rate_limit_error" in str(error)
    assert "req_fake_1" in str(error)


async def test_retry_after_may_be_an_http_date(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    server.script(HttpError(429, retry_after=email.utils.formatdate(time.time() + 30, usegmt=True)))
    error = await failure(provider)
    assert error.retry_after is not None
    assert 20 < error.retry_after <= 30


@pytest.mark.parametrize("status", [408, 500, 502, 503, 529])
async def test_overload_and_server_errors_are_retryable(
    server: FakeAnthropic, provider: AnthropicProvider, status: int
) -> None:
    server.script(HttpError(status))
    error = await failure(provider)
    assert (error.retryable, error.status, error.retry_after) == (True, status, None)
    assert len(server.requests) == 1  # one attempt: the client does not retry by itself


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
async def test_request_errors_are_not_retryable(
    server: FakeAnthropic, provider: AnthropicProvider, status: int
) -> None:
    server.script(HttpError(status))
    error = await failure(provider)
    assert (error.retryable, error.status) == (False, status)
    assert "fake" in str(error)  # the provider's own message
    assert "README.md" not in str(error)  # nor any of the request body


async def test_the_server_can_overrule_the_status(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    server.script(HttpError(500, headers={"x-should-retry": "false"}))
    assert not (await failure(provider)).retryable


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"id": "msg_1", "type": "message", "con',
        b"",
        b"[]",
        b'{"id": "msg_1", "type": "message"}',
        b'{"content": [{"type": "text"}], "stop_reason": "end_turn"}',
        b'{"content": [], "stop_reason": "end_turn", "usage": {"input_tokens": "many"}}',
    ],
)
async def test_a_malformed_reply_is_retryable(
    server: FakeAnthropic, provider: AnthropicProvider, body: bytes
) -> None:
    server.script(RawBody(body))
    error = await failure(provider)
    assert (error.retryable, error.status) == (True, 200)
    assert "malformed" in str(error)
    assert error.reason == "malformed reply (HTTP 200)"  # what the retry's log line says


async def test_a_dropped_connection_is_retryable(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    await provider.send(provider.encode_request(conversation()))  # leaves a kept-alive socket
    server.script(Drop())
    error = await failure(provider)
    assert (error.retryable, error.status) == (True, None)
    assert len(server.requests) == 2
    assert error.reason.startswith("connection failed (")


async def test_a_timeout_is_retryable(server: FakeAnthropic) -> None:
    provider = AnthropicProvider(API_KEY, base_url=server.base_url, timeout_seconds=0.2)
    server.script(Stall())
    error = await failure(provider)
    await provider.close()
    assert error.retryable
    assert "no reply within 0.2 s" in str(error)
    assert error.reason == "timeout (ReadTimeout)"


async def test_a_refused_connection_is_retryable() -> None:
    provider = AnthropicProvider(API_KEY, base_url=f"http://127.0.0.1:{unused_port()}")
    error = await failure(provider)
    await provider.close()
    assert (error.retryable, error.status) == (True, None)
    assert error.reason == "connection failed (ConnectError)"


def test_the_key_comes_from_the_environment() -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicProvider.from_environment({})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicProvider.from_environment({"ANTHROPIC_API_KEY": ""})
    environment = {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}
    provider = AnthropicProvider.from_environment(environment)
    assert provider.base_url == "http://127.0.0.1:9"
    assert API_KEY not in repr(provider)


def test_a_bad_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        AnthropicProvider(API_KEY, base_url="ftp://example.com")


def _through_the_log(value: dict[str, payload.JSONValue]) -> dict[str, payload.JSONValue]:
    decoded = payload.decode(payload.encode(value))
    assert isinstance(decoded, dict)
    return decoded


async def test_a_blank_text_block_is_never_stored_nor_sent_again(
    server: FakeAnthropic, provider: AnthropicProvider
) -> None:
    # Claude often opens a tool call with "\n\n"; the API refuses that block sent back.
    call = ToolCall("toolu_1", "Bash", {"command": "ls"})
    server.script(Reply(text="\n\n", tool_calls=(call,)))
    reply = await provider.send(provider.encode_request(conversation()))
    assert reply.content == (call,)  # what the log records
    # A log written before this fix holds the blank block: the fold leaves it out.
    created = events.TaskCreated(model="anthropic:test-model", prompt="List the files.")
    replied = events.ModelReplied((Text("\n\n"), call), "tool_use", Usage())
    finished = events.ToolFinished("toolu_1", "README.md", False)
    log = [
        created,
        events.ModelCalled("h"),
        replied,
        events.ToolStarted("toolu_1", "Bash", {}),
        finished,
    ]
    state = fold([LoggedEvent(seq, event) for seq, event in enumerate(log, 1)])
    request = build_request(state, "test-model", ())
    await provider.send(provider.encode_request(request))  # the fake refuses blank blocks
    sent = server.requests[-1].json()["messages"]
    assert sent[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    ]

"""Usage as each real API sends it, over HTTP from the fakes: cache and reasoning tokens
in their own fields, and a reply with no usage read as unknown, never 0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.openai import OpenAIProvider
from noeta.backends.models.usage import anthropic_usage, openai_usage
from noeta.backends.models.wire import MalformedReply
from noeta.core.ports.model import Usage
from noeta.testing.fake_providers import FakeAnthropic, FakeOpenAI, Reply
from tests.backends.models.sample_requests import API_KEY, conversation


@pytest.fixture
def anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


async def test_openai_reasoning_and_cached_tokens_are_read(openai: FakeOpenAI) -> None:
    openai.script(
        Reply(input_tokens=100, cache_read_tokens=2048, output_tokens=900, reasoning_tokens=640)
    )
    provider = OpenAIProvider(API_KEY, base_url=openai.base_url)
    try:
        reply = await provider.send(provider.encode_request(conversation()))
    finally:
        await provider.close()
    wire = openai.billed[0][1]
    assert wire.reasoning_tokens == 640
    assert reply.usage == Usage(
        input_tokens=100, output_tokens=900, cache_read_tokens=2048, reasoning_tokens=640
    )


@pytest.mark.parametrize("fake_kind", ["anthropic", "openai"])
async def test_a_reply_without_usage_is_unknown_usage(
    fake_kind: str, anthropic: FakeAnthropic, openai: FakeOpenAI
) -> None:
    fake = anthropic if fake_kind == "anthropic" else openai
    fake.script(Reply(with_usage=False))
    provider: AnthropicProvider | OpenAIProvider
    if fake_kind == "anthropic":
        provider = AnthropicProvider(API_KEY, base_url=anthropic.base_url)
    else:
        provider = OpenAIProvider(API_KEY, base_url=openai.base_url)
    try:
        reply = await provider.send(provider.encode_request(conversation()))
    finally:
        await provider.close()
    assert reply.usage is None


def test_anthropic_usage_as_the_messages_api_sends_it() -> None:
    usage = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000,
        "output_tokens": 56,
        "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
    }
    assert anthropic_usage(usage) == Usage(12, 56, 4000, 300)
    assert anthropic_usage(None) is None


def test_openai_usage_details_may_be_absent_or_null() -> None:
    plain = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    assert openai_usage(plain) == Usage(10, 3)
    nulls = plain | {"prompt_tokens_details": None, "completion_tokens_details": None}
    assert openai_usage(nulls) == Usage(10, 3)
    with pytest.raises(MalformedReply, match="completion_tokens_details"):
        openai_usage(plain | {"completion_tokens_details": 7})
    with pytest.raises(MalformedReply, match="reasoning_tokens"):
        openai_usage(plain | {"completion_tokens_details": {"reasoning_tokens": -1}})

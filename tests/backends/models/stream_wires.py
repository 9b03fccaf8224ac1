"""Both adapters, each with its fake, shared by a test module: `wire` is one of them, as
new (each fake forgets what the last test scripted and was sent)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.openai import OpenAIProvider
from noeta.core.ports.model import ProviderError
from noeta.testing.fake_providers import FakeAnthropic, FakeOpenAI
from noeta.testing.fake_server import FakeServer
from tests.backends.models.sample_requests import API_KEY, assert_keeps_key_secret, conversation


@dataclass
class Wire:
    server: FakeServer
    provider: AnthropicProvider | OpenAIProvider

    def stream_body(self) -> bytes:
        return self.provider.encode_request(conversation())

    def whole_body(self) -> bytes:
        """The same request without streaming: the reply comes as one JSON document."""
        return self.provider.encode_request(conversation(), stream=False)

    async def failure(self) -> ProviderError:
        with pytest.raises(ProviderError) as caught:
            await self.provider.send(self.stream_body())
        assert_keeps_key_secret(caught.value)
        return caught.value


@pytest.fixture(scope="module")
async def wires() -> AsyncIterator[dict[str, Wire]]:
    with FakeAnthropic() as anthropic, FakeOpenAI() as openai:
        made = {
            "anthropic": Wire(anthropic, AnthropicProvider(API_KEY, base_url=anthropic.base_url)),
            "openai": Wire(openai, OpenAIProvider(API_KEY, base_url=openai.base_url)),
        }
        yield made
        for wire in made.values():
            await wire.provider.close()


@pytest.fixture(params=["anthropic", "openai"])
def wire(request: pytest.FixtureRequest, wires: dict[str, Wire]) -> Wire:
    chosen = wires[request.param]
    chosen.server.reset()
    return chosen

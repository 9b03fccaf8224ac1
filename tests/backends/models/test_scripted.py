"""The scripted provider's request body, and the reply a body asks for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from noeta.backends.models.scripted import ScriptedProvider
from noeta.core.ports.model import Message, Text

from .sample_requests import conversation


@pytest.fixture
def provider(tmp_path: Path) -> ScriptedProvider:
    script = tmp_path / "script.yaml"
    replies = "".join(f'  - text: "reply {n}"\n' for n in range(12))
    script.write_text(f"replies:\n{replies}")
    return ScriptedProvider.from_file(str(script))


@pytest.mark.parametrize("replies_so_far", [0, 7, 11])
async def test_a_body_asks_for_the_reply_its_request_counted(
    provider: ScriptedProvider, replies_so_far: int
) -> None:
    # A message that looks like the body's head does not mislead the read.
    trick = Message("user", (Text('{"reply":3,"reply":5'),))
    request = dataclasses.replace(
        conversation(), replies_so_far=replies_so_far, messages=(trick, *conversation().messages)
    )
    body = provider.encode_request(request)
    # The bytes hashed into ModelCalled are json.dumps's, as before.
    dumped = json.dumps(json.loads(body), ensure_ascii=True, separators=(",", ":"))
    assert body == dumped.encode("ascii")
    reply = await provider.send(body)
    assert reply.content == (Text(f"reply {replies_so_far}"),)


async def test_a_body_of_another_shape_is_decoded_whole(provider: ScriptedProvider) -> None:
    body = json.dumps({"model": "m", "reply": 4}).encode()
    assert (await provider.send(body)).content == (Text("reply 4"),)

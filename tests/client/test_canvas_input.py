"""A canvas that cannot run is refused before anything is written, naming the member
(ADR-0104): an unknown job, arguments its function does not take, input failing its
schema, an empty group or chain, nesting past the canvas's bound. Both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.client.canvas import CanvasRefused, Signature, chain, chord, group, signature
from noeta.core.rules.canvas import MAX_NESTING
from tests.client.canvas_jobs import add, tsum


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[AsyncClient]:
    await (await open_store(store_url, migrate=True)).close()
    async with AsyncClient(store_url) as client:
        yield client


def nested(levels: int) -> Signature | object:
    made: object = add.s(1, 1)
    for _ in range(levels):
        made = chain(made)  # type: ignore[arg-type]
    return made


@pytest.mark.parametrize(
    ("canvas", "message"),
    [
        (chain(add.s(1, 1), signature("refund", [1])), "canvas member m1 (refund): no job named"),
        (group(add.s(1, 1), add.s("one", 1)), "canvas member m1 (add): invalid input for add"),
        # In a chain, the second member receives the first's result: a third argument.
        (chain(add.s(1, 1), add.s(2, 3)), "canvas member m1 (add): add(): too many"),
        (chord(group(add.s(1, 1)), tsum.s([1])), "canvas member m1 (tsum): tsum(): too many"),
        (group(), "a group needs at least one member (this one has none)"),
        (chord(group(), tsum.s()), "a group needs at least one member"),
        (chain(), "a chain needs at least one member"),
        (nested(MAX_NESTING + 1), f"the canvas nests deeper than {MAX_NESTING} levels"),
        (chain(add.s(1, 1), "add"), "a canvas member must be a signature (fn.s(...))"),
    ],
)
async def test_a_bad_canvas_is_refused_naming_the_member_and_nothing_is_written(
    client: AsyncClient, canvas: object, message: str
) -> None:
    with pytest.raises(CanvasRefused) as refused:
        await client.canvas(canvas)  # type: ignore[arg-type]
    assert message in str(refused.value)
    assert await client.tasks() == []


async def test_a_canvas_id_that_leaves_no_room_for_its_members_is_refused(
    client: AsyncClient,
) -> None:
    with pytest.raises(CanvasRefused, match="shorter id"):
        await client.canvas(group(add.s(1, 1), add.s(2, 2)), id="c" * 126)
    assert await client.tasks() == []

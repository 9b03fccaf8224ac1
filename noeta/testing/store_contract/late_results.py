"""The contract for late results: a tool's result kept, without a claim, for the call's
next claimer (ADR-040). First kept wins; the log and the task row are never touched."""

from __future__ import annotations

import asyncio

import pytest

from noeta.core.errors import Conflict, PayloadError, StoreUnavailable, UnknownTask
from noeta.core.ports.store import Finish, LateResult, NewEvent, Store
from noeta.testing.store_contract.fixtures import (
    LEASE,
    created,
    take_over,
)


def late(
    call_id: str = "c1", content: str = "done", *, is_error: bool = False, epoch: int = 1
) -> LateResult:
    return LateResult("a", call_id, content, is_error, epoch, "w1")


class LateResultContract:
    """Keeping late results and reading them back."""

    async def test_a_worker_whose_claim_was_taken_over_keeps_its_result(self, store: Store) -> None:
        await store.create_task(created("a"))
        stale = await store.claim("w1", ["default"], LEASE)
        assert stale is not None
        await store.append(stale, 1, [NewEvent("tool-started", {"call_id": "c1"})])
        heir = await take_over(store, stale, "w2")
        with pytest.raises(Conflict):
            await store.append(stale, 2, [NewEvent("tool-finished", {"call_id": "c1"})])
        # The append was refused; the result is still kept, without a claim.
        assert await store.keep_late_result(late())
        kept = await store.late_results("a")
        assert [(r.task_id, r.call_id, r.content, r.is_error, r.epoch, r.worker) for r in kept] == [
            ("a", "c1", "done", False, 1, "w1")
        ]
        assert kept[0].created_at is not None
        # Nothing in the log or the task row moved: the heir's next append still fits.
        record = await store.get_task("a")
        assert record is not None and (record.last_seq, record.owner_epoch) == (2, heir.epoch)
        assert [e.type for e in await store.read_log("a")] == ["created", "tool-started"]
        assert await store.append(heir, 2, [NewEvent("tool-finished", {"call_id": "c1"})]) == 3

    async def test_the_first_late_result_for_a_call_is_kept(self, store: Store) -> None:
        # The same call id in the same task is the same invocation: a second result for it
        # (a retry-safe call re-run by a later epoch) adds nothing, and a hint that a
        # claimer may already have read must not change under it.
        await store.create_task(created("a"))
        assert await store.keep_late_result(late(content="first", is_error=False))
        assert not await store.keep_late_result(late(content="second", is_error=True, epoch=2))
        kept = await store.late_results("a")
        assert [(r.content, r.is_error, r.epoch) for r in kept] == [("first", False, 1)]

    async def test_late_results_are_per_call_and_per_task(self, store: Store) -> None:
        await store.create_task(created("a"))
        await store.create_task(created("b"))
        assert await store.keep_late_result(late("c1", "one", is_error=False))
        assert await store.keep_late_result(late("c2", "two", is_error=True))
        assert await store.late_results("b") == []
        assert await store.late_results("nope") == []
        kept = await store.late_results("a")
        assert [(r.call_id, r.content, r.is_error) for r in kept] == [
            ("c1", "one", False),
            ("c2", "two", True),
        ]

    async def test_a_late_result_keeps_its_content_exactly(self, store: Store) -> None:
        await store.create_task(created("a"))
        content = "nul \x00 surrogate \udcff emoji \U0001f600 " + "x" * 100_000
        assert await store.keep_late_result(late(content=content, is_error=False))
        assert (await store.late_results("a"))[0].content == content

    async def test_a_wait_for_a_late_result_finds_one_kept_before(self, store: Store) -> None:
        await store.create_task(created("a"))
        assert await store.keep_late_result(late("c1", "kept"))
        found = await store.wait_for_late_result("a", "c1", 0.0)
        assert found is not None and (found.call_id, found.content) == ("c1", "kept")

    async def test_a_wait_for_a_late_result_ends_with_none_when_none_comes(
        self, store: Store
    ) -> None:
        await store.create_task(created("a"))
        assert await store.keep_late_result(late("c2", "another call's"))
        assert await store.wait_for_late_result("a", "c1", 0.2) is None

    async def test_a_wait_for_a_late_result_finds_one_kept_meanwhile(self, store: Store) -> None:
        await store.create_task(created("a"))
        waiting = asyncio.ensure_future(store.wait_for_late_result("a", "c1", 600.0))
        assert await store.keep_late_result(late("c1", "kept meanwhile"))
        found = await asyncio.wait_for(waiting, 60)  # a hang's bound, not a timing check
        assert found is not None and found.content == "kept meanwhile"

    async def test_a_late_result_for_an_unknown_task_is_refused(self, store: Store) -> None:
        with pytest.raises(UnknownTask):
            await store.keep_late_result(late())

    @pytest.mark.parametrize(
        "bad",
        [
            LateResult("a", "", "x", False, 1, "w1"),
            LateResult("a", "c\x001", "x", False, 1, "w1"),
            LateResult("a", "c" * 513, "x", False, 1, "w1"),
            LateResult("a", "c1", "x", False, 0, "w1"),
            LateResult("a", "c1", "x", False, 1, ""),
        ],
    )
    async def test_a_bad_late_result_is_refused_before_any_write(
        self, store: Store, bad: LateResult
    ) -> None:
        await store.create_task(created("a"))
        with pytest.raises(PayloadError):
            await store.keep_late_result(bad)
        assert await store.late_results("a") == []

    async def test_a_finished_task_still_keeps_a_late_result(self, store: Store) -> None:
        # The call may have been settled as "outcome unknown" and the task finished since:
        # the operator still gets to see what it really did.
        await store.create_task(created("a"))
        claim = await store.claim("w2", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("finished", {})], next_state=Finish())
        assert await store.keep_late_result(late())
        assert len(await store.late_results("a")) == 1

    async def test_a_closed_store_cannot_keep_or_read_late_results(self, store: Store) -> None:
        await store.create_task(created("a"))
        await store.close()
        with pytest.raises(StoreUnavailable):
            await store.keep_late_result(late())
        with pytest.raises(StoreUnavailable):
            await store.late_results("a")

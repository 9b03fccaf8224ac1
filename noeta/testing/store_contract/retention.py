"""The contract for pruning: finished tasks go with every row that names them, live ones
and their families stay, batches add up, a dry run only counts, and pruned ids stay
taken unless the operator forgets them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from noeta.core.ports.retention import PruneCounts, Pruning
from noeta.core.ports.store import (
    CronFire,
    Delivery,
    Finish,
    LateResult,
    NewEvent,
    Snapshot,
    Store,
    TaskStatus,
)
from noeta.testing.store_contract.bulk import bulk
from noeta.testing.store_contract.fixtures import LEASE, created

NOW = timedelta(0)  # every finished task is old enough


def pruning(store: Store) -> Pruning:
    assert isinstance(store, Pruning)
    return store


async def finish(store: Store, task_id: str, status: TaskStatus = TaskStatus.DONE) -> None:
    claim = await store.claim_task("w", task_id, LEASE)
    assert claim is not None, task_id
    record = await store.get_task(task_id)
    assert record is not None
    await store.append(
        claim, record.last_seq, [NewEvent("finished", {})], next_state=Finish(status)
    )


class RetentionContract:
    """`prune_finished`."""

    async def test_a_pruned_task_leaves_no_row_behind(self, store: Store) -> None:
        slot = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
        await store.fire_cron(CronFire("nightly", slot, created("cron-run")))
        for task_id in ("gone", "live"):
            await store.create_task(created(task_id))
            await store.deliver(Delivery(task_id, {"text": "hi"}, "m1"))
            await store.put_snapshot(Snapshot(task_id, "v1", 1, b"state"))
            await store.keep_late_result(LateResult(task_id, "c1", "late", False, 1, "w"))
        await finish(store, "gone")
        await finish(store, "cron-run", TaskStatus.FAILED)

        counts = await pruning(store).prune_finished(NOW)

        assert counts == PruneCounts(tasks=2, events=4)
        for task_id in ("gone", "cron-run"):
            assert await store.get_task(task_id) is None
            assert await store.read_log(task_id) == []
            assert await store.read_inbox(task_id, untaken_only=False) == []
            assert await store.get_snapshot(task_id, "v1") is None
            assert await store.late_results(task_id) == []
        assert [fire.task_id for fire in await store.cron_history("nightly")] == []
        # The live task is untouched.
        assert [e.type for e in await store.read_log("live")] == ["created"]
        assert len(await store.read_inbox("live")) == 1
        assert await store.get_snapshot("live", "v1") is not None
        assert len(await store.late_results("live")) == 1

    async def test_only_tasks_finished_long_enough_ago_go(self, store: Store) -> None:
        await store.create_task(created("a"))
        await finish(store, "a")
        assert await pruning(store).prune_finished(timedelta(hours=1)) == PruneCounts()
        assert await store.get_task("a") is not None

    async def test_only_the_queue_named_is_pruned(self, store: Store) -> None:
        await bulk(store).create_tasks([created("a"), created("b", queue="other")])
        await finish(store, "a")
        await finish(store, "b")
        assert (await pruning(store).prune_finished(NOW, queue="other")).tasks == 1
        assert await store.get_task("a") is not None and await store.get_task("b") is None

    async def test_batches_add_up(self, store: Store) -> None:
        await bulk(store).create_tasks([created(f"t{n}") for n in range(5)])
        for n in range(5):
            await finish(store, f"t{n}", TaskStatus.CANCELLED if n % 2 else TaskStatus.DONE)
        counts = await pruning(store).prune_finished(NOW, batch_size=2)
        assert counts == PruneCounts(tasks=5, events=10)
        assert await store.list_tasks() == []

    async def test_a_dry_run_counts_and_removes_nothing(self, store: Store) -> None:
        await bulk(store).create_tasks([created("a"), created("b"), created("live")])
        await finish(store, "a")
        await finish(store, "b")
        assert await pruning(store).prune_finished(NOW, dry_run=True) == PruneCounts(2, 4)
        assert len(await store.list_tasks()) == 3

    async def test_a_pruned_id_stays_taken_unless_forgotten(self, store: Store) -> None:
        await bulk(store).create_tasks([created("kept-id"), created("forgotten-id")])
        await finish(store, "kept-id")
        await pruning(store).prune_finished(NOW)
        assert not await store.create_task(created("kept-id"))
        assert await store.get_task("kept-id") is None
        await finish(store, "forgotten-id")
        await pruning(store).prune_finished(NOW, forget_ids=True, batch_size=1)
        assert await store.create_task(created("forgotten-id"))
        # The operator forgot every pruned id: the one kept before too.
        assert await store.create_task(created("kept-id"))

    async def test_a_family_goes_only_when_all_of_it_has_finished(self, store: Store) -> None:
        # A subtask's id is <parent>.<call>.<n>: its finish delivers to the parent, and
        # the parent's finish may deliver a cancel to it.
        ids = ["p", "p.c1.1", "q", "q.c1.1"]
        await bulk(store).create_tasks([created(task_id) for task_id in ids])
        await finish(store, "p.c1.1")  # its parent p is live
        await finish(store, "q")  # its subtask q.c1.1 is live
        assert await pruning(store).prune_finished(NOW) == PruneCounts()
        await finish(store, "p")
        await finish(store, "q.c1.1")
        assert (await pruning(store).prune_finished(NOW)).tasks == 4

    async def test_a_subtask_whose_call_id_has_dots_stays_while_its_parent_is_live(
        self, store: Store
    ) -> None:
        # Ids launched before call ids with dots were hashed: p.a.b.1 is a subtask of p,
        # not of p.a; pruned, a cancel of p would fail for ever delivering to it.
        ids = ["p", "p.a.b.1", "p.a.b.1.x.y.z.2"]
        await bulk(store).create_tasks([created(task_id) for task_id in ids])
        await finish(store, "p.a.b.1.x.y.z.2")
        await finish(store, "p.a.b.1")
        assert await pruning(store).prune_finished(NOW) == PruneCounts()
        await finish(store, "p")
        assert (await pruning(store).prune_finished(NOW)).tasks == 3

    async def test_a_batch_is_bounded_by_events_and_a_huge_task_goes_in_parts(
        self, store: Store
    ) -> None:
        await store.create_task(created("huge"))
        claim = await store.claim_task("w", "huge", LEASE)
        assert claim is not None
        steps = [NewEvent("step", {"n": n}) for n in range(25)]
        await store.append(claim, 1, steps, next_state=Finish())  # 26 events
        for task_id in ("a", "b"):
            await store.create_task(created(task_id))
            await finish(store, task_id)
        counts = await pruning(store).prune_finished(NOW, batch_events=10)
        assert counts == PruneCounts(tasks=3, events=30)
        assert await store.get_task("huge") is None and await store.read_log("huge") == []

    async def test_taken_ids_names_those_of_tasks_and_of_pruned_ones(self, store: Store) -> None:
        await bulk(store).create_tasks([created("live"), created("gone")])
        claim = await store.claim_task("w", "gone", LEASE)
        assert claim is not None
        ending = [NewEvent("finished", {})]
        await store.append(claim, 1, ending, next_state=Finish(TaskStatus.FAILED))
        # Here, not in the bulk contract: pruning is the owner's (the worker role may not).
        assert (await pruning(store).prune_finished(NOW)).tasks == 1
        asked = ["live", "gone", "free", "live"]
        assert await bulk(store).taken_ids(asked) == {"live", "gone"}
        assert await bulk(store).taken_ids([]) == set()

    async def test_prune_tasks_takes_the_finished_ones_named_whole(self, store: Store) -> None:
        slot = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
        await store.fire_cron(CronFire("nightly", slot, created("cron-run")))
        ids = ["gone", "not-named", "live", "p", "p.c1.1"]
        await bulk(store).create_tasks([created(task_id) for task_id in ids])
        for task_id in ("gone", "live"):
            await store.deliver(Delivery(task_id, {"text": "hi"}, "m1"))
            await store.put_snapshot(Snapshot(task_id, "v1", 1, b"state"))
            await store.keep_late_result(LateResult(task_id, "c1", "late", False, 1, "w"))
        for task_id in ("gone", "not-named", "p.c1.1", "cron-run"):
            await finish(store, task_id, TaskStatus.FAILED)
        named = ["gone", "live", "p.c1.1", "cron-run", "no-such-task"]

        counts = await pruning(store).prune_tasks(named)

        # The running one, and the subtask whose parent is live, stay.
        assert counts == PruneCounts(tasks=2, events=4)
        for task_id in ("gone", "cron-run"):
            assert await store.get_task(task_id) is None
            assert await store.read_log(task_id) == []
            assert await store.read_inbox(task_id, untaken_only=False) == []
            assert await store.get_snapshot(task_id, "v1") is None
            assert await store.late_results(task_id) == []
        assert [fire.task_id for fire in await store.cron_history("nightly")] == []
        for task_id in ("not-named", "live", "p", "p.c1.1"):
            assert await store.get_task(task_id) is not None
        assert len(await store.read_inbox("live")) == 1
        assert not await store.create_task(created("gone"))  # its id stays taken
        assert await pruning(store).prune_tasks(["gone"]) == PruneCounts()  # gone already
        assert await pruning(store).prune_tasks([]) == PruneCounts()

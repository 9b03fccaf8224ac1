"""The contract for logs and snapshots: payloads stored exactly (or refused before any
write), snapshots per version, loading, listing."""

from __future__ import annotations

import pytest

from noeta.core.errors import PayloadError, UnknownTask
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import (
    Delivery,
    NewEvent,
    Snapshot,
    Store,
    TaskStatus,
)
from noeta.testing.store_contract.fixtures import LEASE, created


class LogContract:
    """What is stored comes back exactly; snapshots, load and listing."""

    async def test_payloads_round_trip_exactly(self, store: Store) -> None:
        nested: JSONValue = "bottom"
        for _ in range(150):
            nested = [nested]
        invalid_utf8 = b"ok \xff\xfe bytes \x00 end".decode("utf-8", errors="surrogateescape")
        values: list[JSONValue] = [
            "NUL \x00 inside",
            invalid_utf8,
            "lone \ud800 surrogate",
            "x" * (1024 * 1024),
            nested,
            {"emoji": "\U0001f600", "cjk": "单写者", "n": -12345678901234567890},
            1.5e-300,
            True,
            None,
            {"": [{}, []]},
        ]
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        events = [NewEvent(f"v{i}", value) for i, value in enumerate(values)]
        await store.append(claim, 1, events)
        assert [e.data for e in (await store.read_log("a"))[1:]] == values
        await store.deliver(Delivery("a", values[1], dedupe_key="key"))
        assert (await store.read_inbox("a"))[0].payload == values[1]

    async def test_unstorable_payloads_fail_before_writing(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        too_deep: JSONValue = 1
        for _ in range(1000):
            too_deep = [too_deep]
        for bad in (float("nan"), b"bytes", too_deep, {1: "int key"}, ("tuple",)):
            with pytest.raises(PayloadError):
                await store.append(claim, 1, [NewEvent("ok", 1), NewEvent("bad", bad)])  # type: ignore[arg-type]
            with pytest.raises(PayloadError):
                await store.deliver(Delivery("a", bad))  # type: ignore[arg-type]
        for bad_key in ("k" * 10_000, "nul \x00", "lone \ud800"):
            with pytest.raises(PayloadError):
                await store.deliver(Delivery("a", "x", dedupe_key=bad_key))
        for bad_id in ("", "nul \x00", "lone \udc80"):
            with pytest.raises(PayloadError):
                await store.create_task(created(bad_id))
        assert len(await store.read_log("a")) == 1
        assert await store.read_inbox("a") == []

    # --- snapshots and listing ----------------------------------------------------

    async def test_snapshots_are_kept_per_version(self, store: Store) -> None:
        await store.create_task(created("a"))
        await store.put_snapshot(Snapshot("a", "v1", 1, b"\x00state-1"))
        await store.put_snapshot(Snapshot("a", "v2", 1, b"other"))
        await store.put_snapshot(Snapshot("a", "v1", 5, b"\x00state-5"))
        assert await store.get_snapshot("a", "v1") == Snapshot("a", "v1", 5, b"\x00state-5")
        assert await store.get_snapshot("a", "v2") == Snapshot("a", "v2", 1, b"other")
        assert await store.get_snapshot("a", "v3") is None
        with pytest.raises(UnknownTask):
            await store.put_snapshot(Snapshot("nope", "v1", 1, b""))

    async def test_load_reads_snapshot_log_after_it_and_untaken_inbox(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("e2", 2), NewEvent("e3", 3)])
        await store.deliver(Delivery("a", "hi"))
        loaded = await store.load("a", "v1")
        assert loaded.snapshot is None and [e.seq for e in loaded.events] == [1, 2, 3]
        assert [entry.payload for entry in loaded.inbox] == ["hi"]
        await store.put_snapshot(Snapshot("a", "v1", 2, b"state"))
        loaded = await store.load("a", "v1")
        assert loaded.snapshot == Snapshot("a", "v1", 2, b"state")
        assert [e.seq for e in loaded.events] == [3]
        assert [e.seq for e in (await store.load("a", "v2")).events] == [1, 2, 3]

    async def test_list_tasks_by_status_and_queue(self, store: Store) -> None:
        await store.create_task(created("a", queue="q1"))
        await store.create_task(created("b", queue="q2"))
        await store.create_task(created("c", queue="q2"))
        claim = await store.claim("w", ["q2"], LEASE)
        assert claim is not None
        running = await store.list_tasks(status=TaskStatus.RUNNING)
        assert [t.id for t in running] == [claim.task_id]
        assert {t.id for t in await store.list_tasks(queue="q2")} == {"b", "c"}
        assert {t.id for t in await store.list_tasks()} == {"a", "b", "c"}
        assert len(await store.list_tasks(limit=2)) == 2

"""NOETA_APPEND_JOURNAL: every append the store acknowledged is a journal line, written
after the ack; a refused append writes none (the cluster run reads these lines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noeta.backends.stores.sqlite import SqliteStore
from noeta.core.errors import Conflict
from noeta.core.ports.store import NewEvent
from noeta.testing.store_contract import created
from noeta.worker.append_journal import ENV, journaled


async def test_acknowledged_appends_are_journaled_refused_ones_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal"
    monkeypatch.setenv(ENV, str(journal))
    store = journaled(await SqliteStore.open(str(tmp_path / "s.db")))
    try:
        await store.create_task(created("a"))
        claim = await store.claim("w1", ["default"], 30.0)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("x", 1), NewEvent("y", 2)])
        with pytest.raises(Conflict):
            await store.append(claim, 1, [NewEvent("stale", {})])
        await store.append(claim, 3, [NewEvent("z", 3)])
    finally:
        await store.close()
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert lines == [
        {"task": "a", "epoch": claim.epoch, "worker": "w1", "first_seq": 2, "types": ["x", "y"]},
        {"task": "a", "epoch": claim.epoch, "worker": "w1", "first_seq": 4, "types": ["z"]},
    ]


async def test_without_the_variable_the_store_is_unwrapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    store = await SqliteStore.open(str(tmp_path / "s.db"))
    assert journaled(store) is store
    await store.close()

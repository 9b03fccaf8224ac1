"""A store error in the middle of a run (here: the database turned read-only, as after a
failover) leaves the runner as that error, for the worker to handle: never counted as an
internal error of the task (SPEC §6 caps those)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import migrate_database
from noeta.core.errors import StoreUnavailable
from noeta.core.runner.task import TaskRunner

from .test_runner import create, script

if TYPE_CHECKING:  # imported only for types: pytest would try to collect a Test* class
    from noeta.testing.postgres import TestPostgres


async def test_a_read_only_store_mid_run_is_a_store_error_not_a_bug(
    database_url: str,
    postgres_server: TestPostgres,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await migrate_database(database_url)
    store = await open_store(database_url)
    try:
        await create(store, "t", script(tmp_path, {"text": "4"}), prompt="2+2?")
        claim = await store.claim_task("w", "t", 60)
        assert claim is not None
    finally:
        await store.close()
    postgres_server.set_read_only(database_url, True)
    read_only = await open_store(database_url)  # loading reads; the first append fails
    caplog.set_level(logging.ERROR)
    try:
        with pytest.raises(StoreUnavailable, match="read-only"):
            await TaskRunner(read_only, ProviderRegistry()).run(claim)
    finally:
        await read_only.close()
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]

"""Bulk actions in the background of `noeta web` (issue 31 item 5): the confirmed POST
returns at once to the run's page, which shows how far the run is and stops it between
two batches; a run stopped and started again from the list skips what was done, so no
task is retried twice. The run is held after its first batch by a gate the test opens
(no timing)."""

from __future__ import annotations

import asyncio
import html
import re
import threading
from collections.abc import Callable

import pytest
from starlette.testclient import TestClient

from noeta.client import bulk_actions
from noeta.core import failpoints
from noeta.core.ports.store import Store
from tests.web.test_actions import form_fields
from tests.web.test_bulk_actions import failed_task, run_ended


async def test_a_run_shows_its_progress_stops_between_batches_and_goes_on_when_run_again(
    store: Store, web: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(6):
        await failed_task(store, f"f{n}")
    monkeypatch.setattr(bulk_actions, "check_batch", lambda size: 2)  # three batches
    after_a_batch, go_on = threading.Event(), threading.Event()

    async def held(name: str) -> None:  # the run waits after its batches until go_on
        if name == "bulk.after_batch":
            after_a_batch.set()
            await asyncio.to_thread(go_on.wait, 120)

    monkeypatch.setattr(failpoints, "hit", held)
    http = web()
    confirmation = http.get("/bulk/retry", params={"status": "failed"})
    fields = form_fields(confirmation.text, "/bulk/retry")
    started = http.post("/bulk/retry", data=fields)
    assert started.status_code == 303  # at once: the run goes on in the background
    run = started.headers["location"]
    assert after_a_batch.wait(120)

    running = http.get(run).text
    said = re.search(r'id="progress">([^<]*)<', running)
    assert said is not None
    assert html.unescape(said.group(1)) == (
        "retry 6 failed tasks: 2 of at most 6 done so far, in batches"
    )
    assert 'data-refresh="2"' in running  # live.js reads it again
    stop = form_fields(running, f"{run}/stop")
    assert http.post(f"{run}/stop", data={**stop, "csrf": "forged"}).status_code == 403
    stopping = http.post(f"{run}/stop", data=stop)
    assert stopping.status_code == 303 and stopping.headers["location"] == run
    assert "stopping after the batch in progress" in http.get(run).text
    go_on.set()  # the batch in progress ends, and the run stops there

    page = run_ended(http, started)
    assert (
        "stopped: retried 4 of 6 tasks. Run the action again from the list to go on: "
        "what was done is skipped"
    ) in html.unescape(page)
    retried = [n for n in range(6) if await store.get_task(f"f{n}.retry-1") is not None]
    assert len(retried) == 4

    again = run_ended(http, http.post("/bulk/retry", data=fields))
    assert "retried 2 of 6 tasks; 4 skipped (retried already)" in again
    for n in range(6):
        assert await store.get_task(f"f{n}.retry-1") is not None
        assert await store.get_task(f"f{n}.retry-2") is None  # none retried twice


async def test_an_unknown_run_is_one_message(store: Store, web: Callable[..., TestClient]) -> None:
    http = web()
    missing = http.get("/bulk/runs/nothing-here")
    assert missing.status_code == 404
    assert "there is no such bulk run here" in missing.text and "Traceback" not in missing.text
    refused = http.post("/bulk/runs/nothing-here/stop", data={"csrf": "x"})
    assert refused.status_code == 403  # its form was never issued

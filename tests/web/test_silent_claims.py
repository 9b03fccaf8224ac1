"""The timeline shows a claim that wrote nothing (issue 31 item 6): after the log's last
event, which worker held the task, until when, and why it let go, from the task row and
the workers registry."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from starlette.testclient import TestClient

from noeta.core.ports.store import Store
from noeta.core.rules import events
from tests.web.conftest import task_with_log
from tests.web.test_workers_page import LEASE, registry_of, run_of


def silent_mark(page: str) -> str:
    found = re.search(r'<li class="epoch silent" id="silent-claim">([^<]*)</li>', page)
    return html.unescape(found.group(1)) if found else ""


async def test_a_claim_that_wrote_nothing_is_shown_after_the_last_event(
    store: Store, web: Callable[..., TestClient]
) -> None:
    first = await task_with_log(store, "quiet", [events.TurnEnded("waiting")])
    await store.release(first)
    http = web()
    assert silent_mark(http.get("/tasks/quiet").text) == ""  # every claim wrote

    await registry_of(store).record_worker(run_of("lacks-plugin"), LEASE)
    second = await store.claim_task("lacks-plugin", "quiet", 600)
    assert second is not None
    held = silent_mark(http.get("/tasks/quiet").text)
    assert held.startswith("epoch 2: claimed by lacks-plugin after the last event; it holds")
    assert held.endswith("and has written nothing yet; its worker is live")

    assert await store.release(second)
    let_go = silent_mark(http.get("/tasks/quiet").text)
    assert let_go.startswith(
        "epoch 2: claimed by lacks-plugin after the last event; it wrote nothing and handed "
        "the task back at "
    )
    assert let_go.endswith(
        "(it lacked a plugin the task pinned, or was shutting down); its worker is live"
    )

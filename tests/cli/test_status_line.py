"""The status line's drawing, apart from a terminal: what `noeta run`'s followed store
sends it, and that a fault in it never fails an append that landed."""

from __future__ import annotations

import io
from pathlib import Path

from noeta.backends.stores import open_store
from noeta.cli.progress import TaskProgress
from noeta.cli.status_line import CLEAR, StatusLine
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events


async def test_a_fault_in_the_line_never_fails_an_append_that_landed(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'noeta.db'}", migrate=True)
    screen = io.StringIO()
    line = StatusLine(TaskProgress(), screen, at_once=True)
    followed = line.follow(store)
    try:
        created = events.TaskCreated(model="scripted:x", prompt="go")
        assert await followed.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
        assert screen.getvalue() == CLEAR + "turn 1 step 1 | calling the model"
        claim = await followed.claim_task("w", "t", 60)
        assert claim is not None
        # Data this version cannot decode: the line cannot follow, the append stands.
        unreadable = NewEvent("ModelReplied", {"v": 1, "content": "not a list"})
        assert await followed.append(claim, 1, [unreadable]) == 2
        assert screen.getvalue().endswith(CLEAR) and line.progress is None
        called = NewEvent(*events.encode(events.ModelCalled("sha")))
        assert await followed.append(claim, 2, [called]) == 3
        assert screen.getvalue().endswith(CLEAR)  # nothing drawn once it stopped
        assert [e.type for e in await store.read_log("t")][-2:] == ["ModelReplied", "ModelCalled"]
    finally:
        await store.close()

"""Run by the previous release's Python, not this checkout's (previous_release.py): writes
tasks with that release's store, then waits until its workers have written to some. Uses
only what every release has (open_store, NewTask, NewEvent, read_log, decode), so it imports
nothing else of this repository.

    python previous_side.py URL PLAN
    PLAN: {"tasks": [[ID, QUEUE, [[TYPE, DATA], ...]], ...], "written": [ID, ...], "within": S}
    python previous_side.py --unknown < [[TYPE, DATA], ...]
    prints, for each event, whether that release decodes it as written by a newer noeta
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events


async def main(url: str, plan: dict[str, Any]) -> None:
    store = await open_store(url, application_name="noeta-previous-release")
    try:
        for task_id, queue, log in plan["tasks"]:
            new = [NewEvent(event_type, data) for event_type, data in log]
            await store.create_task(NewTask(task_id, new, queue))
        waiting = set(plan["written"])
        deadline = time.monotonic() + plan["within"]
        while waiting:
            if time.monotonic() > deadline:
                sys.exit(f"the previous release's workers wrote nothing to {sorted(waiting)}")
            for task_id in sorted(waiting):
                if any(event.owner for event in await store.read_log(task_id)):
                    waiting.discard(task_id)
            await asyncio.sleep(0.2)  # a poll of the rows this waits for
    finally:
        await store.close()


def unknown(logged: list[list[Any]]) -> list[bool]:
    return [isinstance(events.decode(kind, data), events.UnknownEvent) for kind, data in logged]


if __name__ == "__main__":
    if sys.argv[1:] == ["--unknown"]:
        print(json.dumps(unknown(json.load(sys.stdin))))
    else:
        asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))

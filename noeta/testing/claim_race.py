"""A claimant process for the store contract's cross-process race.

    python -m noeta.testing.claim_race URL WORKER

Claims from the `race` queue until nothing is left, appending one event under each claim
and finishing the task; prints one line per task it finished. The contract test runs
several of these at once and checks no task was finished twice.
"""

from __future__ import annotations

import asyncio
import sys

from noeta.backends.stores import open_store
from noeta.core.ports.store import Finish, NewEvent

RACE_QUEUE = "race"


async def race(url: str, worker: str) -> list[str]:
    store = await open_store(url, application_name=f"noeta-race-{worker}", max_connections=2)
    finished = []
    try:
        while (claim := await store.claim(worker, [RACE_QUEUE], lease_seconds=60)) is not None:
            log = await store.read_log(claim.task_id)
            event = NewEvent("raced", {"worker": worker, "epoch": claim.epoch})
            await store.append(claim, log[-1].seq, [event], next_state=Finish())
            finished.append(claim.task_id)
    finally:
        await store.close()
    return finished


def main() -> None:
    url, worker = sys.argv[1], sys.argv[2]
    for task_id in asyncio.run(race(url, worker)):
        print(task_id, flush=True)


if __name__ == "__main__":
    main()

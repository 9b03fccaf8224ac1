"""A program that closes its client with hundreds of enqueues in flight: a `gather` whose
first call fails (a bad input) while the rest wait for the one pooled connection."""

from __future__ import annotations

import asyncio
import sys

from noeta.client import AsyncClient
from tests.client import jobs_for_tests

assert jobs_for_tests


async def main(url: str) -> None:
    async with AsyncClient(url, max_connections=1) as client:
        bad = client.enqueue("resize", {"image": "x.png", "width": "wide"})
        good = [client.enqueue("resize", {"image": f"{n}.png", "width": n}) for n in range(500)]
        await asyncio.gather(bad, *good)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))

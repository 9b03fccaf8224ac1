"""What the server keeps of a store's sessions when the path to it forgets them (ADR-0154),
on a real network path whose packets the kernel drops (tests/dropping_path.py), to a
PostgreSQL of the path's own in the server's namespace: its sockets face the path.

A firewall, a NAT or a failover that forgets a connection drops the client's goodbye with
its other packets, so its backend sits idle on a socket nobody answers, holding one of
`max_connections`. The client's keepalives (ADR-0129) free the client's end; the server's,
set to the same by the store, free the server's."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from psycopg.conninfo import make_conninfo

from tests.dropping_path import DroppingPath, dropping_path

# A client that opens a store (its pool, a LISTEN connection) and waits to be killed.
CLIENT = """
import asyncio, sys
from noeta.backends.stores.postgres import PostgresStore

async def main():
    store = await PostgresStore.open(
        sys.argv[1], migrate=True, application_name="forgotten", min_connections=2
    )
    listening = await store._listening_connection("forgotten-listening")
    await listening.execute("LISTEN forgotten")
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.read)

asyncio.run(main())
"""
# Keepalives a test can wait for: the first probe after 1 s idle, 2 unanswered 1 s apart.
QUICK_KEEPALIVES = {"keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "2"}
FORGOTTEN = """
SELECT application_name, count(*) FROM pg_stat_activity WHERE application_name LIKE 'forgotten%'
 GROUP BY 1 ORDER BY 1
"""


@pytest.fixture
def path(postgres_url: str) -> Iterator[DroppingPath]:
    with dropping_path(postgres_url) as made:
        yield made


def test_a_forgotten_sessions_backends_end_within_the_keepalive_time(path: DroppingPath) -> None:
    url = make_conninfo(path.start_postgres(), **QUICK_KEEPALIVES)
    observer = path.connect_inside(url)
    client = subprocess.Popen(
        [*path.command(), sys.executable, "-c", CLIENT, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        ready = client.stdout.readline()
        assert ready == "ready\n", (ready, client.stderr.read() if client.stderr else "")
        open_at_first = observer.execute(FORGOTTEN).fetchall()
        assert open_at_first == [("forgotten", 2), ("forgotten-listening", 1)]
        assert len(path.forget()) >= 3
        client.kill()  # its kernel's goodbyes go out on the forgotten path, and vanish
        client.wait()
        # A notification sent to the listener now is never acknowledged: no keepalive
        # probe follows unacknowledged data, only the server's user timeout ends it.
        observer.execute("NOTIFY forgotten")
        began = time.monotonic()
        # The server's probes: one after 1 s idle, two more 1 s apart, then the reset; or
        # 3 s of a reply or notification unacknowledged.
        while left := observer.execute(FORGOTTEN).fetchall():
            assert time.monotonic() - began < 30, f"backends still held: {left}"
            time.sleep(0.2)  # polling the server's own count: it is the condition itself
    finally:
        client.kill()
        client.wait()
        observer.close()

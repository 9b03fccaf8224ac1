"""How long a connection whose packets a firewall silently drops stays established, by its
keepalive settings (ADR-0129): noeta's own (60 s idle, every 10 s, 3 probes), the
tests' quick ones (1 s, 1 s, 2) and none (`keepalives=0`).

One process in a network namespace of its own (tests/dropping_path.py: as root, with
iproute2) opens one connection of each kind through the path and runs a statement on
each; the path then forgets them (drops every packet of theirs, for good), and the
kernel's table of established connections is read every 0.2 s until each is reset or
--within seconds pass. Seconds from the drop, load-independent to within the 0.2 s read:
the kernel's timers, not the CPU, decide them.

Run:  .venv/bin/python bench/keepalive_drop.py [--dsn DSN] [--within 120]
(always exits 0; without root or iproute2 it says why and measures nothing)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from common import parser, server

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests.dropping_path

from noeta.backends.stores.postgres.session import with_keepalives
from tests.dropping_path import DroppingPath

# In the client's namespace: connect with each URL, run a statement, say each socket's
# port, and hold the connections until told to end.
CLIENT = """
import os, socket, sys, psycopg
held = [psycopg.connect(url) for url in sys.argv[1:]]
for connection in held:
    connection.execute("SELECT 1")
    print(socket.socket(fileno=os.dup(connection.fileno())).getsockname()[1], flush=True)
sys.stdin.readline()
"""


def measure(path: DroppingPath, within: float) -> dict[str, float | None]:
    kinds = {
        "noeta's own (60 s, 10 s, 3)": with_keepalives(path.url()),
        "the tests' quick (1 s, 1 s, 2)": path.url(
            keepalives_idle="1", keepalives_interval="1", keepalives_count="2"
        ),
        "none (keepalives=0)": path.url(keepalives="0"),
    }
    client = subprocess.Popen(
        [*path.command(), sys.executable, "-c", CLIENT, *kinds.values()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        kind_of = {int(client.stdout.readline()): kind for kind in kinds}
        path.forget()
        started = time.monotonic()
        reset: dict[str, float | None] = dict.fromkeys(kinds)
        while time.monotonic() - started < within and None in reset.values():
            established = path.established()
            for port, kind in kind_of.items():
                if port not in established and reset[kind] is None:
                    reset[kind] = time.monotonic() - started
            time.sleep(0.2)
        return reset
    finally:
        client.stdin.write("\n")
        client.stdin.flush()
        client.wait(10)


def main() -> None:
    arguments = parser(__doc__, quick=False)
    arguments.add_argument("--within", type=float, default=120.0, help="seconds to wait at most")
    options = arguments.parse_args()
    with server(options.dsn) as dsn:
        path = DroppingPath(dsn)
        try:
            path.open()
        except (OSError, subprocess.CalledProcessError) as failed:
            print(f"cannot build a dropping path here (root and iproute2 needed): {failed}")
            return
        try:
            reset = measure(path, options.within)
        finally:
            path.close()
    print(f"\n{'keepalives':<32} reset after the drop")
    for kind, seconds in reset.items():
        shown = f"{seconds:.1f} s" if seconds is not None else f"not within {options.within:.0f} s"
        print(f"{kind:<32} {shown}")


if __name__ == "__main__":
    main()

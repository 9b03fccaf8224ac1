"""The cluster run's PostgreSQL and the faults done to it: restarts (fast, immediate) of
a server this run controls, and worker backends terminated as an admin or a pooler would.

NOETA_TEST_POSTGRES_DSN names a server the run does not control: it cannot restart it,
so the restart faults are left out (and said so); otherwise an embedded server, restarted
with pg_ctl on the same port, so every client's DSN stays valid.
"""

from __future__ import annotations

import random
import threading

import psycopg
from psycopg.conninfo import conninfo_to_dict

from noeta.core.errors import StoreUnavailable
from noeta.testing.postgres import TestPostgres

# Worker connections name themselves "noeta-worker:<name>" (noeta/cli/worker.py).
WORKER_BACKENDS = """
SELECT pid FROM pg_stat_activity
 WHERE application_name LIKE 'noeta-worker:%%' AND pid <> pg_backend_pid()
"""
TERMINATE = "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid) t"


class ServerUnanswered(Exception):
    """The store URL the run was given does not answer: one line, no traceback."""


class ClusterServer:
    def __init__(self) -> None:
        try:
            self.postgres = TestPostgres()
            with psycopg.connect(self.postgres.admin_dsn, connect_timeout=5):
                pass
        except (psycopg.Error, StoreUnavailable) as error:
            raise ServerUnanswered(_describe(error)) from None
        # Held through a restart: a run stopped mid-fault waits for the server to be back.
        self.restarting = threading.Lock()

    @property
    def can_restart(self) -> bool:
        return self.postgres.embedded is not None

    def new_schema(self) -> str:
        return self.postgres.new_schema()

    def restart(self, mode: str) -> None:
        """Stop the server in `mode` (fast: clients are told; immediate: no checkpoint,
        WAL replayed at start, like a crash) and start it again on the same port."""
        assert self.postgres.embedded is not None
        with self.restarting:
            self.postgres.embedded.stop(mode=mode)
            self.postgres.embedded.start()

    def settled(self) -> None:
        """Return once no restart is under way (one a cancelled fault left running)."""
        with self.restarting:
            pass

    def terminate_worker_backends(self, rng: random.Random) -> int:
        """Terminate a random half of the workers' backends; how many were terminated."""
        with psycopg.connect(self.postgres.admin_dsn, autocommit=True, connect_timeout=5) as c:
            pids = [row[0] for row in c.execute(WORKER_BACKENDS).fetchall()]
            chosen = rng.sample(pids, max(1, len(pids) // 2)) if pids else []
            row = c.execute(TERMINATE, (chosen,)).fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        self.postgres.stop()


def _describe(error: BaseException) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"the PostgreSQL server does not answer: {message}"


def host_and_port(dsn: str) -> tuple[str, int]:
    parts = conninfo_to_dict(dsn)
    return str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432)

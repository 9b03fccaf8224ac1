"""Making a worker process non-dumpable, so the commands it runs cannot read its secrets.

A child of the same user can read its parent's /proc/<pid>/environ and memory, which
hold the store's password and the providers' keys, unless the parent is non-dumpable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def make_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0) on Linux; whether it took effect (never on other systems).

    Also stops core dumps of this process. Root bypasses it: a process running as root
    can read any process's /proc files whatever this flag says (SECURITY.md).
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)

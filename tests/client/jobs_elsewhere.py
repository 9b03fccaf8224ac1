"""A job module the test worker is not configured with (the plugin_missing path)."""

from __future__ import annotations

import noeta


@noeta.tool
def archive(path: str) -> str:
    """Archive a file."""
    return path

"""The no-op job bench/jobs.py drains (a module of decorated functions is a plugin)."""

from __future__ import annotations

import noeta


@noeta.tool(retry_safe=True)
def noop() -> None:
    """Does nothing: what is measured is the queue and the fenced log around it."""

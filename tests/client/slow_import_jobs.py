"""A job module slow to import in a job's own process: $NOETA_TEST_SLOW_IMPORT seconds,
set by a test for the processes it starts (a heavy library's import, as jobs have)."""

from __future__ import annotations

import os
import time

import noeta

time.sleep(float(os.environ.get("NOETA_TEST_SLOW_IMPORT", "0")))  # the import's own work


@noeta.tool(time_limit=2)
def quick_after_a_slow_import() -> str:
    """Done at once, once its module is imported."""
    return "done"

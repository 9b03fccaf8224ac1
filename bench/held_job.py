"""The job bench/burst_spread.py holds in every slot: it returns once the bench creates the
file it names (looked for every 10 ms, in the run's own thread: the job holds its slot,
nothing else). A module of decorated functions is a plugin."""

from __future__ import annotations

import time
from pathlib import Path

import noeta


@noeta.tool(retry_safe=True)
def held(release: str) -> None:
    """Return once `release` exists."""
    while not Path(release).exists():
        time.sleep(0.01)

"""The tools' tests run on both loops a worker may run on (ADR-0151, conftest.py)."""

from __future__ import annotations

import pytest

from noeta.cli.event_loop import running_name


async def test_each_async_test_here_runs_on_the_loop_its_id_names(
    request: pytest.FixtureRequest,
) -> None:
    assert request.node.name.endswith(f"[{running_name()}]"), request.node.name

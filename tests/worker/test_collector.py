"""A worker collects young objects less often once warmed up (ADR-0119): at CPython's
700 the cyclic collector took about a tenth of a one-shot task's worker CPU."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from noeta.worker.warmup import YOUNG_OBJECTS, warm_up


@pytest.fixture
def collector() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.usefixtures("collector")
async def test_a_warmed_up_worker_freezes_its_start_and_collects_less_often() -> None:
    _, middle, old = gc.get_threshold()
    await warm_up()
    assert gc.get_threshold() == (YOUNG_OBJECTS, middle, old)
    assert gc.get_freeze_count() > 0  # what the start built is no longer walked
    assert gc.isenabled()  # cycles are still collected

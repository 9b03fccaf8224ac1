"""Cron fires plain jobs: a `job:` schedule enqueues one call of a decorated function
(issue 16), and a schedule naming an unknown job or bad input is refused at start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.errors import ConfigError
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import Store
from noeta.scheduler.cronfile import JobAction, TaskAction, load_cron_files
from noeta.scheduler.scheduler import Scheduler, check_job_schedules
from tests.client import jobs_for_tests
from tests.scheduler.test_scheduler import down_since, every_minute

assert jobs_for_tests  # its functions are the jobs these schedules name


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


async def test_a_job_schedule_enqueues_the_call(store: Store) -> None:
    await down_since(store, 3, "thumbs")
    action = JobAction("resize", {"image": "a.png", "width": 8}, queue="media")
    scheduler = Scheduler(store, [every_minute("thumbs", action=action)])
    await scheduler.tick()
    [task] = await store.list_tasks(queue="media")
    log = await store.read_log(task.id)
    assert [event.type for event in log] == ["TaskCreated", "CallRequested", "PluginsPinned"]
    assert log[1].data["input"] == {"image": "a.png", "width": 8}  # type: ignore[index,call-overload]


def test_a_cron_file_job_is_read_and_checked_at_start(tmp_path: Path) -> None:
    cron = tmp_path / "cron.yaml"
    cron.write_text(
        "schedules:\n"
        "  - name: thumbs\n"
        "    schedule: '@daily'\n"
        "    job: {name: resize, input: {image: a.png, width: 8}}\n"
        "  - name: bad\n"
        "    schedule: '@daily'\n"
        "    job: {name: resize, input: {image: a.png}}\n"
        "  - name: gone\n"
        "    schedule: '@daily'\n"
        "    job: {name: refund}\n"
    )
    good, bad, gone = load_cron_files([cron])
    assert good.action == JobAction("resize", {"image": "a.png", "width": 8})
    check_job_schedules([good])
    with pytest.raises(ConfigError, match=r"line 5: schedule 'bad': .*'width' is a required"):
        check_job_schedules([bad])
    with pytest.raises(ConfigError, match="schedule 'gone': no job named 'refund'"):
        check_job_schedules([gone])


def test_a_job_input_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    cron = tmp_path / "cron.yaml"
    cron.write_text(
        "schedules:\n  - name: x\n    schedule: '@daily'\n    job: {name: resize, input: [1]}\n"
    )
    with pytest.raises(ConfigError, match=r"line 4: .*a job's input is a mapping"):
        load_cron_files([cron])


async def test_a_fired_task_or_job_carries_its_key_and_priority(store: Store) -> None:
    await down_since(store, 1, "t")
    await down_since(store, 1, "j")
    task = TaskAction(prompt="tick", model="scripted:x.yaml", queue="q", key="k", priority=3)
    job = JobAction("resize", {"image": "a.png", "width": 8}, queue="q", key="k", priority=5)
    await Scheduler(store, [every_minute("t", action=task), every_minute("j", action=job)]).tick()
    await queue_settings_store(store).set_queue("q", QueueChange(per_key_concurrency=1))
    batch = await store.claim_and_load("w", ["q"], 30.0, limit=5, snapshot_version="v")
    assert len(batch) == 1  # both have key k
    claimed = await store.get_task(batch[0].claim.task_id)
    assert claimed is not None and claimed.id.startswith("cron-j-")  # priority 5 first

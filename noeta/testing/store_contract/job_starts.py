"""The contract for a claim that starts the fresh plain jobs it takes (`JobStarts`,
ADR-0101): their first events written with the claim, exactly as the claimer's first
append would write them, and only where that append would have been exactly those."""

from __future__ import annotations

import asyncio

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import (
    ClaimedTask,
    Delivery,
    JobStarts,
    NewEvent,
    NewTask,
    Store,
)
from noeta.core.rules import events as ev
from noeta.testing.store_contract.fixtures import LEASE, SHORT_LEASE

JOB_PIN = Pin("jobs", "module:jobs", "1.0", "h")
OTHER_PIN = Pin("other", "module:other", "2.0", "h")
# An input whose text has quotes, a backslash, non-ASCII and a "retry_of" of its own.
JOB_INPUT: dict[str, JSONValue] = {"to": 'a "b" \\ é', "retry_of": "x", "n": [1, {}]}


def job(
    task_id: str,
    *,
    pins: tuple[Pin, ...] | None = (JOB_PIN,),
    retry_of: str = "",
    member_of: str = "",
) -> NewTask:
    """A plain job's task as a client makes it: TaskCreated, CallRequested, its pin; a
    canvas's member (`member_of`) as its canvas makes it, its SubtaskOf last."""
    made: list[ev.Event] = [
        ev.TaskCreated(model="", tools=("send",)),
        ev.CallRequested("job", "send", JOB_INPUT, retry_of=retry_of),
    ]
    if pins is not None:
        made.append(ev.PluginsPinned(pins))
    if member_of:
        made.append(ev.SubtaskOf(member_of, "m0", 1))
    return NewTask(task_id, [NewEvent(*ev.encode(event)) for event in made], queue="jobs")


async def claim_starting(
    store: Store, starts: JobStarts | None, limit: int = 1, worker: str = "w"
) -> list[ClaimedTask]:
    return await store.claim_and_load(
        worker, ["jobs"], LEASE, limit=limit, snapshot_version="v", job_starts=starts
    )


def logged_types(claimed: ClaimedTask) -> list[str]:
    assert claimed.loaded is not None
    return [event.type for event in claimed.loaded.events]


class JobStartsContract:
    """Claims that start fresh jobs (ADR-0101)."""

    async def test_a_fresh_jobs_claim_writes_its_tool_started_as_its_run_would(
        self, store: Store
    ) -> None:
        await store.create_task(job("j", retry_of="earlier"))
        [claimed] = await claim_starting(store, JobStarts((JOB_PIN,)))

        assert claimed.loaded is not None and claimed.loaded.started_by_claim
        log = await store.read_log("j")
        types = [e.type for e in log]
        assert types == ["TaskCreated", "CallRequested", "PluginsPinned", "ToolStarted"]
        assert claimed.loaded.events == log  # read back with the claim, as it landed
        started = log[-1]
        assert (started.seq, started.epoch, started.owner) == (4, claimed.claim.epoch, "w")
        assert started.data == ev.encode(ev.ToolStarted("job", "send", JOB_INPUT))[1]
        record = await store.get_task("j")
        assert record is not None and record.last_seq == 4

    async def test_a_claimer_with_other_pins_writes_them_first_as_its_append_would(
        self, store: Store
    ) -> None:
        await store.create_task(job("pinned"))
        await store.create_task(job("unpinned", pins=None))
        claimed = await claim_starting(store, JobStarts((JOB_PIN, OTHER_PIN)), limit=2)

        assert len(claimed) == 2
        for each in claimed:
            assert each.loaded is not None and each.loaded.started_by_claim
            assert logged_types(each)[-2:] == ["PluginsPinned", "ToolStarted"]
            both = ev.encode(ev.PluginsPinned((JOB_PIN, OTHER_PIN)))[1]
            assert each.loaded.events[-2].data == both
            record = await store.get_task(each.claim.task_id)
            assert record is not None and record.last_seq == each.loaded.events[-1].seq

    async def test_what_a_claim_does_not_start(self, store: Store) -> None:
        """No JobStarts asked; a pin the claimer lacks; a message in the inbox; a task that
        is no job: each is claimed and left to its run, as before."""
        await store.create_task(job("not-asked"))
        [plain] = await claim_starting(store, None)
        await store.create_task(job("lacking", pins=(Pin("gone", "module:gone", "1", "h"),)))
        [lacking] = await claim_starting(store, JobStarts((JOB_PIN,)))
        await store.create_task(job("told"))
        await store.deliver(Delivery("told", {"kind": "message", "text": "hi"}, "message:1"))
        [told] = await claim_starting(store, JobStarts((JOB_PIN,)))
        agent = [NewEvent(*ev.encode(ev.TaskCreated(model="scripted:x", prompt="go")))]
        await store.create_task(NewTask("agent", agent, queue="jobs"))
        [agent_claim] = await claim_starting(store, JobStarts((JOB_PIN,)))

        for each in (plain, lacking, told, agent_claim):
            assert each.loaded is not None and not each.loaded.started_by_claim, each.claim
            assert "ToolStarted" not in logged_types(each)

    async def test_a_taken_over_job_is_not_started_by_its_new_claim(self, store: Store) -> None:
        await store.create_task(job("lapsed"))
        [first] = await claim_starting(store, None, worker="w0")
        renewed = await store.renew([first.claim], SHORT_LEASE)  # cut short only now
        assert "lapsed" in renewed
        claimed: list[ClaimedTask] = []
        while not claimed:  # once that lease runs out (a condition only time brings)
            await asyncio.sleep(0.02)
            claimed = await claim_starting(store, JobStarts((JOB_PIN,)))
        [second] = claimed
        assert second.claim.taken_over and second.claim.epoch == first.claim.epoch + 1
        assert second.loaded is not None and not second.loaded.started_by_claim
        assert "ToolStarted" not in logged_types(second)

    async def test_a_canvas_member_is_started_by_its_claim_named_or_not(self, store: Store) -> None:
        """A member's SubtaskOf comes after its pin (ADR-0104): its run would still write
        only the pin and the ToolStarted first, so a claim starts it, and so does the
        claim of the worker continuing its canvas by name (ADR-0109)."""
        starts = JobStarts((JOB_PIN, OTHER_PIN))
        await store.create_task(job("c.m0.1", member_of="c"))
        await store.create_task(job("c.m1.1", member_of="c"))
        [walked] = await claim_starting(store, starts)
        [named] = await store.claim_and_load(
            "w", ["jobs"], LEASE, snapshot_version="v", job_starts=starts, only=["c.m1.1"]
        )
        for each in (walked, named):
            assert each.loaded is not None and each.loaded.started_by_claim, each.claim
            log = await store.read_log(each.claim.task_id)
            assert each.loaded.events == log
            assert [(e.seq, e.type) for e in log[3:]] == [
                (4, "SubtaskOf"),
                (5, "PluginsPinned"),
                (6, "ToolStarted"),
            ]
            assert log[-1].data == ev.encode(ev.ToolStarted("job", "send", JOB_INPUT))[1]

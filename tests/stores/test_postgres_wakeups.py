"""Wake-ups (ADR-0087): a task made claimable wakes one registered idle worker of its
queue, on that worker's own channel; nobody registered, nothing is sent; a creator racing
a registration is either seen by it or committed before the worker's next claim."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import Delivery, NewEvent, NewTask, Wait
from noeta.testing.store_contract import created

END = "end-of-test"  # sent by the test last: what a channel heard before it is all it heard


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(postgres_url, migrate=True)
    yield store
    await store.close()


class Channels:
    """Test connections LISTENing on channels; what each heard, read up to END."""

    def __init__(self, connection: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        self.connection = connection

    @classmethod
    async def listening(cls, url: str, *names: str) -> Channels:
        connection = await psycopg.AsyncConnection.connect(url, autocommit=True)
        for name in names:
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
        return cls(connection)

    async def heard(self, *names: str) -> dict[str, list[str]]:
        """Everything each channel heard so far: END is sent to each last, and a channel's
        notices arrive in commit order."""
        for name in names:
            await self.connection.execute("SELECT pg_notify(%s, %s)", (name, END))
        heard: dict[str, list[str]] = {name: [] for name in names}
        ended: set[str] = set()
        async for notice in self.connection.notifies(timeout=30):
            if notice.payload == END:
                ended.add(notice.channel)
                if ended == set(names):
                    break
            else:
                heard[notice.channel].append(notice.payload)
        assert ended == set(names), "the END notices did not all arrive"
        return heard


async def idle_rows(url: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        rows = await (await admin.execute("SELECT channel FROM idle_workers ORDER BY 1")).fetchall()
    return [row[0] for row in rows]


async def test_a_claimable_task_wakes_one_registered_worker_of_its_queue(
    store: PostgresStore, postgres_url: str
) -> None:
    a, b, other = "noeta_wake_0000000a", "noeta_wake_0000000b", "noeta_wake_0000000c"
    channels = await Channels.listening(postgres_url, a, b, other, "noeta_wake")
    try:
        for channel, queues in ((a, ["mail"]), (b, ["mail", "x"]), (other, ["other"])):
            assert await store.wait_idle(channel, queues, 30) is None  # nothing falls due
        await store.create_task(created("a", queue="mail"))  # claimable now: one woken
        later = (await store.clock()).replace(year=2999)
        await store.create_task(NewTask("b", [NewEvent("created", {})], "mail", ready_at=later))
        assert len(await idle_rows(postgres_url)) == 2  # the woken worker's row was taken
        claim = await store.claim_task("w", "a", 30)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("turn", {})], next_state=Wait())
        await store.deliver(Delivery("a", "hello"))  # claimable again: the other one
        await store.create_task(created("c", queue="mail"))  # nobody of mail left idle
        heard = await channels.heard(a, b, other, "noeta_wake")
    finally:
        await channels.connection.close()
    assert sorted(heard[a] + heard[b]) == ["mail", "mail"] and heard[a] == ["mail"]
    assert heard[other] == [] and heard["noeta_wake"] == []  # no broadcast any more
    assert await idle_rows(postgres_url) == [other]


async def test_with_no_idle_worker_nothing_is_notified(
    store: PostgresStore, postgres_url: str
) -> None:
    channels = await Channels.listening(postgres_url, "noeta_wake", "noeta_finished")
    try:
        await store.create_tasks([created(f"t{n}", queue="busy") for n in range(20)])
        claim = await store.claim_task("w", "t0", 30)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("turn", {})], next_state=Wait())
        await store.deliver(Delivery("t0", "hello"))
        heard = await channels.heard("noeta_wake", "noeta_finished")
    finally:
        await channels.connection.close()
    assert heard == {"noeta_wake": [], "noeta_finished": []}


async def test_a_batch_wakes_as_many_workers_as_it_has_tasks_and_no_more(
    store: PostgresStore, postgres_url: str
) -> None:
    names = [f"noeta_wake_{n:08x}" for n in range(5)]
    channels = await Channels.listening(postgres_url, *names)
    try:
        for name in names:
            await store.wait_idle(name, ["q1"], 30)
        await store.create_tasks([created(f"a{n}", queue="q1") for n in range(3)])
        heard = await channels.heard(*names)
    finally:
        await channels.connection.close()
    assert sorted(len(payloads) for payloads in heard.values()) == [0, 0, 1, 1, 1]
    assert len(await idle_rows(postgres_url)) == 2


async def test_an_expired_registration_is_never_woken(
    store: PostgresStore, postgres_url: str
) -> None:
    dead, alive = "noeta_wake_000000de", "noeta_wake_000000a1"
    channels = await Channels.listening(postgres_url, dead, alive)
    try:
        await store.wait_idle(dead, ["q"], 30)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute(  # a killed worker's row: its lease ran out unrefreshed
                "UPDATE idle_workers SET expires_at = now() - interval '1 s' WHERE channel = %s",
                (dead,),
            )
        await store.wait_idle(alive, ["q"], 30)  # and the next registration clears it
        await store.create_task(created("t", queue="q"))
        heard = await channels.heard(dead, alive)
    finally:
        await channels.connection.close()
    assert heard == {dead: [], alive: ["q"]}
    assert await idle_rows(postgres_url) == []


WAITING_ON_THE_WAKE_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()
"""


async def test_a_create_committing_after_the_registration_is_seen_by_the_next_claim(
    store: PostgresStore, postgres_url: str
) -> None:
    """The lost wake-up: a creator looked for idle workers before the registration was
    visible, and commits after the worker's claim found nothing. The registration waits
    for that creator to commit, then tells the worker to claim again, and the claim sees
    its task."""
    async with await psycopg.AsyncConnection.connect(postgres_url) as creator:
        await creator.execute(  # its trigger looks now: nobody idle, nobody woken
            "SELECT noeta_create_task('raced', 'race', NULL, ARRAY['created'], ARRAY['{}'])"
        )
        registering = asyncio.create_task(store.wait_idle("noeta_wake_000000ff", ["race"], 30))
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            for _ in range(600):  # the registration waits on the creator's lock: a state
                row = await (await admin.execute(WAITING_ON_THE_WAKE_LOCK)).fetchone()
                if row is not None and row[0] >= 1:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the registration never waited for the creator")
        assert not registering.done()
        await creator.commit()
    assert await registering == 0  # claim before waiting: a task is claimable now
    claim = await store.claim("w", ["race"], 30)
    assert claim is not None and claim.task_id == "raced"


async def test_wake_due_wakes_one_idle_worker_when_a_timer_falls_due(
    store: PostgresStore, postgres_url: str
) -> None:
    first, second = "noeta_wake_00000001", "noeta_wake_00000002"
    channels = await Channels.listening(postgres_url, first, second)
    try:
        start = await store.clock()
        due = start + timedelta(milliseconds=300)
        await store.create_task(created("timer", queue="timers", ready_at=due))
        for channel in (first, second):
            seconds = await store.wait_idle(channel, ["timers"], 30)
            assert seconds is not None and seconds <= 0.3  # when to look, told at once
        clock, next_due = await store.wake_due(start)
        assert next_due == due or clock >= due
        while clock < due:  # the scheduler's loop, in small: look until the time has come
            await asyncio.sleep(0.05)
            clock, next_due = await store.wake_due(start)
        await store.wake_due(clock)  # announced once per window
        heard = await channels.heard(first, second)
    finally:
        await channels.connection.close()
    assert sorted(heard[first] + heard[second]) == ["timers"]


async def test_what_an_append_marks_continued_calls_nobody_unless_its_queue_has_settings(
    store: PostgresStore, postgres_url: str
) -> None:
    """ADR-0117: a canvas member's handback (`Delivery.continued`) and a canvas's next
    member (`NewTask.continued`) are claimed next by the appending worker; calling an
    idle worker for them would only race that claim. The rest of the append calls as
    before, and a queue with settings (which the continuing claim leaves alone) too."""
    idle = [f"noeta_wake_{n:08x}" for n in range(4)]
    channels = await Channels.listening(postgres_url, *idle)
    try:
        for name in idle:
            assert await store.wait_idle(name, ["q", "limited"], 30) is None
        await store.create_task(created("canvas", queue="q"))  # one called: 3 left
        await store.create_task(created("member", queue="q"))  # another: 2 left
        canvas = await store.claim_task("w", "canvas", 30)
        member = await store.claim_task("w", "member", 30)
        assert canvas is not None and member is not None
        await store.append(canvas, 1, [NewEvent("turn", {})], next_state=Wait())
        handback = Delivery("canvas", "end", "handback:m0", continued=True)
        await store.append(member, 1, [NewEvent("end", {})], deliveries=[handback])
        assert len(await idle_rows(postgres_url)) == 2  # the canvas called nobody
        canvas = await store.claim_task("w", "canvas", 30)
        assert canvas is not None
        following = NewTask("next", [NewEvent("created", {})], "q", continued=True)
        sibling = NewTask("sibling", [NewEvent("created", {})], "q")
        await store.append(canvas, 2, [NewEvent("launched", {})], new_tasks=[following, sibling])
        assert len(await idle_rows(postgres_url)) == 1  # the sibling called one, "next" none
        settings = queue_settings_store(store)
        await settings.set_queue("limited", QueueChange(concurrency=5))  # calls the last one
        assert await store.wait_idle(idle[0], ["limited"], 30) is None
        limited = NewTask("limited", [NewEvent("created", {})], "limited", continued=True)
        await store.create_task(created("parent", queue="q"))  # nobody idle of q: no call
        parent = await store.claim_task("w", "parent", 30)
        assert parent is not None
        await store.append(parent, 1, [NewEvent("launched", {})], new_tasks=[limited])
        assert await idle_rows(postgres_url) == []  # a queue with settings calls anyway
        heard = await channels.heard(*idle)
    finally:
        await channels.connection.close()
    # canvas, member, sibling; the settings change, the limited task
    called = sorted(payload for payloads in heard.values() for payload in payloads)
    assert called == ["limited", "limited", "q", "q", "q"]

"""What the cluster runs: scripted tasks (tool calls with side effects, background jobs,
timers, chats taking messages, parents launching subagents) created through the chaos,
the cancels of the parents planned to be cancelled mid-fan-out (fanout.py), and the heal
phase's driving of every chat to its end."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from noeta.core.errors import StoreError
from noeta.core.ports.store import CANCEL_KEY, Delivery, NewEvent, NewTask, Store
from noeta.core.rules import events
from tests.cluster import canvases, fanout

SCRIPTS = Path(__file__).parent / "scripted"
KINDS = ("tools", "job", "timer", "chat", *fanout.PARENTS)
MESSAGES_PER_CHAT = 6
TOOLS = ("Bash", "TodoWrite", "ScheduleWakeup", "Record", "Pause", "Agent")


@dataclass
class Workload:
    store: Store
    rng: random.Random
    kinds: dict[str, str]  # task id -> kind, in the order they are created
    workspaces: Path  # the workers' workspaces root (a parent's git repository is made here)
    created: list[str] = field(default_factory=list)
    sent: list[tuple[str, str]] = field(default_factory=list)  # (task, dedupe key)
    cancelled: set[str] = field(default_factory=set)  # parents sent a cancel mid-fan-out
    in_git: set[str] = field(default_factory=set)  # parents whose workspace is a repository
    # Tasks that get their worker's tools (TaskCreated version 2, which a noeta before
    # ADR-0088 cannot read): the upgrade run's events only the current code knows. It
    # creates them itself, at a chosen point of the roll: create_due leaves them out.
    worker_tools: set[str] = field(default_factory=set)
    # The workers' config, which the canvases' jobs are checked against when submitted.
    config: Path | None = None

    def __post_init__(self) -> None:
        self.in_git |= fanout.in_git(self.kinds)

    @property
    def chats(self) -> list[str]:
        return [task for task in self.created if self.kinds[task] == "chat"]

    def sent_to(self, task_id: str) -> int:
        return sum(1 for sent_to, _ in self.sent if sent_to == task_id)

    async def create(self, task_id: str, queue: str = "default") -> None:
        """Create a task of its planned kind (idempotent by id: safe to retry)."""
        kind = self.kinds[task_id]
        if kind in (*canvases.KINDS, canvases.PLAIN):
            assert self.config is not None, "a workload with canvases needs the config"
            task = canvases.new_task(kind, task_id, self.config)
            await steadily(lambda: self.store.create_task(task))
            self.created.append(task_id)
            return
        if task_id in self.in_git:
            await asyncio.to_thread(fanout.make_git_workspace, self.workspaces / task_id)
        created = events.TaskCreated(
            model=f"scripted:{SCRIPTS / f'{kind}.yaml'}",
            prompt="" if kind == "chat" else "go",
            interactive=kind == "chat",
            tools=None if task_id in self.worker_tools else TOOLS,
        )
        encoded = [NewEvent(*events.encode(created))]
        await steadily(lambda: self.store.create_task(NewTask(task_id, encoded, queue=queue)))
        self.created.append(task_id)

    async def create_due(self, fraction: float) -> None:
        """Create tasks until `fraction` of them exist."""
        waiting = [t for t in self.kinds if t not in self.created and t not in self.worker_tools]
        while waiting and len(self.created) < len(self.kinds) * min(1.0, fraction):
            await self.create(waiting.pop(0))

    async def send_message(self, task_id: str) -> None:
        """Deliver the next message, through store faults (a delivery is idempotent by
        its key); counted as sent once delivered."""
        number = self.sent_to(task_id) + 1
        key = f"message:{task_id}:{number}"
        delivery = Delivery(task_id, {"text": f"message {number}"}, key)
        await steadily(lambda: self.store.deliver(delivery))
        self.sent.append((task_id, key))
        if self.rng.random() < 0.3:  # a sender that retries: delivered once all the same
            await steadily(lambda: self.store.deliver(delivery))

    async def create_outbox(self) -> None:
        """The notify plugin's outbox: never claimed, so its inbox keeps every notification."""
        created = events.TaskCreated(model="scripted:none", prompt="", interactive=True)
        outbox = NewTask(fanout.OUTBOX, [NewEvent(*events.encode(created))], fanout.OUTBOX_QUEUE)
        await steadily(lambda: self.store.create_task(outbox))

    async def cancel_launched(self) -> None:
        """Cancel each parent planned for it once its launches landed: its subagents are
        still at work (slow), so the cancel goes down the tree."""
        for task in self.created:
            if self.kinds[task] != fanout.CANCELLED_PARENT or task in self.cancelled:
                continue
            if any(event.type == "SubtaskLaunched" for event in await self.store.read_log(task)):
                await self.store.deliver(Delivery(task, {"kind": "cancel"}, CANCEL_KEY))
                self.cancelled.add(task)

    async def maybe_chat(self) -> None:
        if self.chats and self.rng.random() < 0.6:
            target = self.rng.choice(self.chats)
            if self.sent_to(target) < MESSAGES_PER_CHAT:
                await self.send_message(target)

    async def finish(self, within: float) -> list[str]:
        """Create what is left, send each chat its remaining messages, cancel it once all
        are answered, and wait until every task has finished. The ids still unfinished at
        the deadline."""
        await self.create_due(1.0)
        for task in self.chats:
            while self.sent_to(task) < MESSAGES_PER_CHAT:
                await self.send_message(task)
        cancelled: set[str] = set()
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await steadily(self.cancel_launched)
            for task in self.chats:
                if task not in cancelled and await self._answered(task):
                    cancel = Delivery(task, {"kind": "cancel"}, CANCEL_KEY)
                    await steadily(lambda: self.store.deliver(cancel))  # noqa: B023 - awaited here
                    cancelled.add(task)
            left = await self.unfinished()
            if not left and len(cancelled) == len(self.chats):
                return []
            await asyncio.sleep(0.5)
        return await self.unfinished()

    async def unfinished(self) -> list[str]:
        records = await self.store.list_tasks(limit=10_000)
        return [r.id for r in records if not r.status.finished and r.id != fanout.OUTBOX]

    async def _answered(self, task: str) -> bool:
        log = await self.store.read_log(task)
        taken = sum(1 for event in log if event.type == "MessageTaken")
        answered = sum(1 for event in log if event.type == "TurnEnded")
        return taken >= MESSAGES_PER_CHAT and answered >= MESSAGES_PER_CHAT


async def steadily(step: Callable[[], Awaitable[object]], within: float = 60.0) -> None:
    """Run one of the driver's own store calls through the faults (each is idempotent:
    deliveries by dedupe key, creations by id)."""
    deadline = time.monotonic() + within
    while True:
        try:
            await step()
            return
        except StoreError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def plan_tasks(rng: random.Random, count: int, planned: tuple[str, ...] = KINDS) -> dict[str, str]:
    """Task id -> kind, in the order they will be created: each kind once (in a seeded
    order; a short run has them all), then at random."""
    kinds = rng.sample(planned, len(planned))[:count]
    kinds += [rng.choice(planned) for _ in range(count - len(kinds))]
    return {f"{kind}-{n:03}": kind for n, kind in enumerate(kinds)}

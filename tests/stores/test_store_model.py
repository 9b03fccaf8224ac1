"""A hypothesis state machine: random claims, appends, releases, waits and deliveries
against a real store, checked step by step against a small model of the fence."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from noeta.backends.stores import open_store
from noeta.core.errors import Conflict
from noeta.core.ports.store import (
    Claim,
    Delivery,
    Finish,
    NewEvent,
    NewTask,
    Store,
    TaskStatus,
    Wait,
    WaitHolding,
)

TASKS = ["t0", "t1", "t2"]
WORKERS = ["w0", "w1"]
LEASE = 600.0  # leases never lapse here; lapses are the contract suite's business


@dataclass
class ModelTask:
    status: TaskStatus = TaskStatus.READY
    epoch: int = 0
    last_seq: int = 1
    untaken: int = 0

    @property
    def claimable(self) -> bool:
        return self.status is TaskStatus.READY or (
            self.status is TaskStatus.WAITING and self.untaken > 0
        )


@dataclass
class Model:
    tasks: dict[str, ModelTask] = field(default_factory=dict)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store: Store = self.run(open_store(url, migrate=True))
        self.model = Model()
        self.claims: list[Claim] = []

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()

    @rule(task_id=st.sampled_from(TASKS))
    def create(self, task_id: str) -> None:
        created = self.run(self.store.create_task(NewTask(task_id, [NewEvent("created", {})])))
        assert created == (task_id not in self.model.tasks)
        self.model.tasks.setdefault(task_id, ModelTask())

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        claim = self.run(self.store.claim(worker, ["default"], LEASE))
        claimable = [i for i, task in self.model.tasks.items() if task.claimable]
        if claim is None:
            assert claimable == []
            return
        assert claim.task_id in claimable
        task = self.model.tasks[claim.task_id]
        task.epoch += 1
        task.status = TaskStatus.RUNNING
        assert claim.epoch == task.epoch
        self.claims.append(claim)

    @rule(
        data=st.data(),
        seq_offset=st.sampled_from([0, 0, 0, -1, 1]),
        next_state=st.sampled_from(["continue", "wait", "hold", "finish"]),
    )
    def append(self, data: st.DataObject, seq_offset: int, next_state: str) -> None:
        if not self.claims:
            return
        claim = data.draw(st.sampled_from(self.claims))
        task = self.model.tasks[claim.task_id]
        expected = task.last_seq + seq_offset
        allowed = (
            claim.epoch == task.epoch
            and task.status in (TaskStatus.RUNNING, TaskStatus.HOLDING)
            and seq_offset == 0
        )
        state = {"continue": None, "wait": Wait(), "hold": WaitHolding(), "finish": Finish()}[
            next_state
        ]
        append = self.store.append(
            claim,
            expected,
            [NewEvent("step", next_state)],
            **({} if state is None else {"next_state": state}),
        )
        if not allowed:
            with pytest.raises(Conflict):
                self.run(append)
            return
        assert self.run(append) == task.last_seq + 1
        task.last_seq += 1
        task.status = {
            "continue": TaskStatus.RUNNING,
            "wait": TaskStatus.WAITING,
            "hold": TaskStatus.HOLDING,
            "finish": TaskStatus.DONE,
        }[next_state]

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if not self.claims:
            return
        claim = data.draw(st.sampled_from(self.claims))
        task = self.model.tasks[claim.task_id]
        released = self.run(self.store.release(claim))
        assert released == (claim.epoch == task.epoch and task.status is TaskStatus.RUNNING)
        if released:
            task.status = TaskStatus.READY

    @rule(task_id=st.sampled_from(TASKS), key=st.sampled_from([None, "k1", "k2"]))
    def deliver(self, task_id: str, key: str | None) -> None:
        if task_id not in self.model.tasks:
            return
        delivered = self.run(self.store.deliver(Delivery(task_id, "hi", dedupe_key=key)))
        inbox = self.run(self.store.read_inbox(task_id, untaken_only=False))
        keys = [entry.dedupe_key for entry in inbox if entry.dedupe_key is not None]
        assert len(keys) == len(set(keys))
        if delivered:
            self.model.tasks[task_id].untaken += 1

    @invariant()
    def rows_match_the_model(self) -> None:
        for task_id, task in self.model.tasks.items():
            row = self.run(self.store.get_task(task_id))
            assert row is not None
            assert (row.status, row.owner_epoch, row.last_seq) == (
                task.status,
                task.epoch,
                task.last_seq,
            )
            assert len(self.run(self.store.read_log(task_id))) == task.last_seq


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_store_follows_the_model(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    examples = {"sqlite": 40, "postgres": 15}[backend]
    counter = iter(range(10_000))

    def machine() -> StoreMachine:
        if backend == "sqlite":
            return StoreMachine(f"sqlite:///{tmp_path / f'model-{next(counter)}.db'}")
        server = request.getfixturevalue("postgres_server")
        return StoreMachine(server.new_migrated_schema())

    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )

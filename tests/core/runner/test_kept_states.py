"""A canvas's folded state kept by its runner between its steps (ADR-0120), on both
stores: the runner's next claim of it continues from that state, a claim after someone
else's reads the log as before, and either way the state is the log folded whole."""

from __future__ import annotations

from noeta.backends.models.registry import ProviderRegistry
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.store import (
    Claim,
    Delivery,
    Finish,
    NewEvent,
    NewTask,
    Store,
    TaskStatus,
)
from noeta.core.rules import events
from noeta.core.rules.subtasks import Handback, handback_key
from noeta.core.rules.task_state import TaskState
from noeta.core.runner.kept_states import Kept, KeptStates
from noeta.core.runner.task import TaskRunner
from noeta.core.task_loading import load_state

LEASE = 60.0
LINK = {"job": "add", "input": {"y": 1}, "receives": "x"}
TREE = {"chain": [{"job": "add", "input": {"x": 0, "y": 1}}, LINK, LINK, LINK]}


class CountedKept(KeptStates):
    """KeptStates that counts the claims it served a state to."""

    def __init__(self) -> None:
        super().__init__()
        self.served = 0

    def take(self, claim: Claim) -> Kept | None:
        kept = super().take(claim)
        self.served += kept is not None
        return kept


async def step(store: Store, runner: TaskRunner, worker: str) -> TaskState:
    claim = await store.claim_task(worker, "c", LEASE)
    assert claim is not None
    result = await runner.run(claim)
    assert result.state == await load_state(store, "c", runner.snapshot_version)
    return result.state


async def hand_back(store: Store, member: int, value: int) -> None:
    call = f"m{member}"
    handback = Handback(f"c.{call}.1", call, "done", str(value))
    await store.deliver(Delivery("c", handback.payload(), handback_key("c", call)))


async def test_the_next_claim_continues_from_the_kept_state_and_no_other_does(
    store: Store,
) -> None:
    created = [events.TaskCreated(model="", tools=()), events.CanvasRequested({"tree": TREE})]
    assert await store.create_task(NewTask("c", [NewEvent(*events.encode(e)) for e in created]))
    mine = TaskRunner(store, ProviderRegistry(), kept=CountedKept())
    other = TaskRunner(store, ProviderRegistry(), kept=CountedKept())
    assert isinstance(mine.kept, CountedKept) and isinstance(other.kept, CountedKept)
    runs = [(mine, "w"), (mine, "w"), (other, "o"), (mine, "w")]
    for member, (runner, worker) in enumerate(runs):
        state = await step(store, runner, worker)  # launches m<member>, then waits
        assert [child for _, child, _ in state.subtasks] == [f"c.m{member}.1"]
        await hand_back(store, member, member + 1)
    assert (await step(store, mine, "w")).finished == "done"
    last = (await store.read_log("c"))[-1]
    assert events.decode(last.type, last.data) == events.TaskFinished("done", answer="4")
    # Served: the 2nd claim (right after the 1st); the 5th, right after the 4th. Not the
    # 4th: the other's claim came between, so its epoch is two past the kept one.
    assert (mine.kept.served, other.kept.served) == (2, 0)


async def test_steps_claimed_with_a_finish_read_after_the_kept_state_and_keep_the_cadence(
    store: Store,
) -> None:
    """ADR-0122: each step claimed by a member's finish (`append_and_claim`, told what the
    runner keeps) reads only the log after it, and its state is still the log folded
    whole; the snapshots keep their cadence (every 3 events here), counted from the last
    snapshot though the claim read none."""
    joint = store.capabilities.append_and_claim
    assert joint is not None
    created = [events.TaskCreated(model="", tools=()), events.CanvasRequested({"tree": TREE})]
    assert await store.create_task(NewTask("c", [NewEvent(*events.encode(e)) for e in created]))
    runner = TaskRunner(store, ProviderRegistry(), snapshot_every=3)
    version = runner.snapshot_version
    state = await step(store, runner, "w")  # the first step: claimed as any task
    cadence, snapshots = 0, []
    for member in range(len(TREE["chain"])):
        cadence = state.last_seq if state.last_seq - cadence >= 3 else cadence
        found = await store.get_snapshot("c", version)
        snapshots.append((found.seq if found else 0, cadence))
        finisher = f"f{member}"
        assert await store.create_task(NewTask(finisher, [NewEvent("TaskCreated", {})]))
        claim = await store.claim_task("w", finisher, LEASE)
        assert claim is not None
        call = f"m{member}"
        handback = Handback(f"c.{call}.1", call, "done", str(member + 1))
        back = Delivery("c", handback.payload(), handback_key("c", call), continued=True)
        then = ClaimAfter("c", "w", ("default",), LEASE, version, known=runner.kept.known("c"))
        _, claimed = await joint.append_and_claim(
            claim, 1, [NewEvent("ended", {})], deliveries=[back],
            next_state=Finish(TaskStatus.DONE), then=then,
        )  # fmt: skip
        assert claimed is not None and claimed.loaded is not None
        assert claimed.loaded.after_seq == state.last_seq and claimed.loaded.snapshot is None
        state = (await runner.run(claimed.claim, claimed.loaded)).state
        assert state == await load_state(store, "c", version)
    assert state.finished == "done"
    assert [found for found, _ in snapshots] == [expected for _, expected in snapshots]
    assert len({found for found, _ in snapshots}) > 1  # more than one snapshot was written

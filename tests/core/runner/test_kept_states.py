"""A canvas's folded state kept by its runner between its steps (ADR-0120), on both
stores: the runner's next claim of it continues from that state, a claim after someone
else's reads the log as before, and either way the state is the log folded whole."""

from __future__ import annotations

from noeta.backends.models.registry import ProviderRegistry
from noeta.core.ports.store import Claim, Delivery, NewEvent, NewTask, Store
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

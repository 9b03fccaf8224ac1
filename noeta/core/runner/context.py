"""RunContext: what a step of the runner (the tool calls) needs of the task's run.

The loop in `task.py` is the one implementation; `calls.py` sees only this, so the two
modules do not import each other and a step cannot reach into the loop's private state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from noeta.core.ports.store import (
    Claim,
    Continue,
    Delivery,
    JobStarts,
    NewTask,
    NextState,
    Store,
)
from noeta.core.ports.tool import Jobs, Tool
from noeta.core.retry import Sleep
from noeta.core.rules.events import Event
from noeta.core.rules.gates import Gate
from noeta.core.rules.task_state import TaskState
from noeta.core.runner.reply_streams import StreamWriter
from noeta.observability import tracing


class RunContext(Protocol):
    """One claim's run of one task, as a step sees it."""

    @property
    def claim(self) -> Claim:
        """The claim this run holds: what its background jobs are keyed by, and whose
        epoch a late result names."""
        ...

    @property
    def task_id(self) -> str: ...

    @property
    def store(self) -> Store:
        """For what lives beside the log (late results); the log only through `append`."""
        ...

    @property
    def state(self) -> TaskState:
        """The fold of everything that has landed, this run's appends included."""
        ...

    @property
    def trace(self) -> tracing.Attempt: ...

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools this process has, by name (the task's config says which it may use)."""
        ...

    @property
    def gates(self) -> Sequence[Gate]: ...

    @property
    def jobs(self) -> Jobs | None:
        """The worker's background jobs; None: a job cannot be started here."""
        ...

    @property
    def streams(self) -> StreamWriter | None:
        """Where a call's output streams for the task's readers (ADR-0114); None: nowhere."""
        ...

    @property
    def workspace(self) -> str:
        """The task's own directory for file tools; "" gives them no file access."""
        ...

    @property
    def sleep(self) -> Sleep:
        """How the run waits (a retry's backoff): asyncio.sleep, or a test's clock."""
        ...

    async def clock(self) -> datetime:
        """The store's clock: the one leases and due times are measured on."""
        ...

    async def append(
        self,
        new_events: Sequence[Event],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
    ) -> None:
        """Append under the claim's fence and fold what landed into `state`; a finishing
        append also carries the task's handback and its children's cancels."""
        ...

    def folded(self, new_events: Sequence[Event]) -> TaskState:
        """The state once `new_events` land (kept: the append that lands them reuses it)."""
        ...

    async def append_settling(self, new_events: Sequence[Event]) -> None:
        """`append`, with the task's finish in the same append when these events end it
        (a job's result): what `next_action` would do next, without the round trip."""
        ...

    @property
    def subagent_models(self) -> tuple[str, ...]:
        """The models the operator allows an Agent call to name (ADR-0076)."""
        ...

    async def model_problem(self, spec: str) -> str:
        """Why this worker cannot use the model `spec` ("" if it can)."""
        ...

    async def queue(self) -> str:
        """The task's queue (its subtasks run on it)."""
        ...

    def starts(self) -> tuple[JobStarts, float] | None:
        """What a task this run creates for its worker to run next may be created started
        with (ADR-0117): the claimer's pins and its lease's seconds; None where its worker
        would not start it with a claim (ADR-0101) or is not a worker."""
        ...

    def continues(self, task_id: str, queue: str | None = None) -> bool:
        """Whether this run's worker claims `task_id` (in `queue`, None if unknown) next, in
        the slot this run ends in (ADR-0109): what the run makes claimable for it is then
        marked `continued`, and calls no idle worker (ADR-0117)."""
        ...

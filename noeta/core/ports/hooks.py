"""Plugin hooks (SPEC §5): what a plugin sees of a task, and the three hooks it may have.

`before_append(view, events)` runs before an append; the records it writes
(`view.record`) and the deliveries it enqueues (`view.enqueue`) land in that same append,
with the events that decided them: after a crash, all or none are there.
`on_event(view, event)` runs after an event commits, so a crash can skip a call; a plugin
that cannot afford that returns its progress mark from `delivered_through(view)` (read
from its own latest record, `view.mark`), and every claim re-delivers the events after
the mark: at least once, side effects keyed by event sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Delivery
from noeta.core.rules.events import Event
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.task_state import TaskState


@dataclass
class TaskView:
    """One task as a hook of plugin `plugin` sees it; what the hook writes rides along."""

    task_id: str
    plugin: str
    state: TaskState
    records: list[JSONValue] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)

    @property
    def mark(self) -> JSONValue:
        """This plugin's latest record in the log (None if it has written none)."""
        return dict(self.state.plugin_records).get(self.plugin)

    def record(self, data: JSONValue) -> None:
        """Write a record (a PluginRecord event): the plugin's own state in the log."""
        self.records.append(data)

    def enqueue(self, delivery: Delivery) -> None:
        """Deliver to a task's inbox in the append that carries this hook's records."""
        self.deliveries.append(delivery)


@runtime_checkable
class BeforeAppend(Protocol):
    name: str

    async def before_append(self, view: TaskView, events: Sequence[Event]) -> None: ...


@runtime_checkable
class OnEvent(Protocol):
    name: str

    async def on_event(self, view: TaskView, event: LoggedEvent) -> None: ...


@runtime_checkable
class DeliveredThrough(Protocol):
    """An `on_event` plugin that cannot miss an event: the seq it has handled through."""

    def delivered_through(self, view: TaskView) -> int: ...


def mark_problem(plugin: str, mark: int, last_seq: int) -> str:
    """Why a progress mark cannot be right ("" if it can): past the log's end, or < 0."""
    if 0 <= mark <= last_seq:
        return ""
    return (
        f"plugin {plugin}: delivered_through returned {mark}, but the log runs from 0 to {last_seq}"
    )

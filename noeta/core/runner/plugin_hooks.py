"""Running plugin hooks for one claim: `before_append` into the append, `on_event` after it,
and at each claim the re-delivery of events after a plugin's progress mark (SPEC §5).

A hook that raises is a plugin bug: `HookFailed` ends the turn with `internal_error`, and
counts toward the cap of two in a row (SPEC §6).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from noeta.core.errors import NoetaError
from noeta.core.ports.hooks import BeforeAppend, DeliveredThrough, OnEvent, TaskView, mark_problem
from noeta.core.ports.store import Delivery, StoredEvent
from noeta.core.rules import events as ev
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.task_state import TaskState

T = TypeVar("T")


class HookFailed(NoetaError):
    """A plugin hook raised, or returned something impossible."""


@dataclass(frozen=True, slots=True)
class HookPlugins:
    """Which plugins have which hooks: sorted once per runner, not per claim (an
    isinstance against a runtime-checkable Protocol costs tens of microseconds)."""

    before: tuple[BeforeAppend, ...]
    after: tuple[OnEvent, ...]

    @classmethod
    def of(cls, plugins: Sequence[object]) -> HookPlugins:
        before = tuple(p for p in plugins if isinstance(p, BeforeAppend))
        return cls(before, tuple(p for p in plugins if isinstance(p, OnEvent)))


class Hooks:
    """The hooks of the plugins a runner has; `broken` after one failed in this claim, so
    that recording the failure does not run them again."""

    def __init__(self, plugins: HookPlugins) -> None:
        self.before = plugins.before
        self.after = plugins.after
        self.broken = False

    @property
    def on_event(self) -> bool:
        return bool(self.after) and not self.broken

    async def before_append(
        self, task_id: str, state: TaskState, new_events: Sequence[ev.Event]
    ) -> tuple[list[ev.Event], list[Delivery]]:
        """The records and deliveries the `before_append` hooks add to this append."""
        records: list[ev.Event] = []
        deliveries: list[Delivery] = []
        if self.broken:
            return records, deliveries
        for plugin in self.before:
            view = TaskView(task_id, plugin.name, state)
            await self._guarded(plugin.name, plugin.before_append(view, new_events))
            records += [ev.PluginRecord(plugin.name, data) for data in view.records]
            deliveries += view.deliveries
        return records, deliveries

    async def on_events(
        self, task_id: str, state: TaskState, logged: Sequence[LoggedEvent], only: str = ""
    ) -> tuple[list[ev.Event], list[Delivery]]:
        """Run `on_event` for each event that landed (a plugin's records excepted); what
        the hooks wrote, to append next."""
        records: list[ev.Event] = []
        deliveries: list[Delivery] = []
        for plugin in self.after:
            if self.broken or (only and plugin.name != only):
                continue
            view = TaskView(task_id, plugin.name, state)
            for each in logged:
                if isinstance(each.event, ev.PluginRecord):
                    continue
                await self._guarded(plugin.name, plugin.on_event(view, each))
            records += [ev.PluginRecord(plugin.name, data) for data in view.records]
            deliveries += view.deliveries
        return records, deliveries

    async def redeliver(
        self,
        task_id: str,
        state: TaskState,
        read_after: Callable[[int], Awaitable[list[StoredEvent]]],
    ) -> tuple[list[ev.Event], list[Delivery]]:
        """At a claim: each plugin with a progress mark gets the events after it again."""
        records: list[ev.Event] = []
        deliveries: list[Delivery] = []
        for plugin in self.after:
            if self.broken or not isinstance(plugin, DeliveredThrough):
                continue
            view = TaskView(task_id, plugin.name, state)
            mark = await self._guarded(plugin.name, _mark(plugin, view))
            problem = mark_problem(plugin.name, mark, state.last_seq)
            if problem:
                self.broken = True
                raise HookFailed(problem)
            if mark == state.last_seq:
                continue
            logged = [
                LoggedEvent(stored.seq, ev.decode(stored.type, stored.data))
                for stored in await read_after(mark)
            ]
            more, sent = await self.on_events(task_id, state, logged, only=plugin.name)
            records += more
            deliveries += sent
        return records, deliveries

    async def _guarded(self, plugin: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except Exception as error:
            self.broken = True
            raise HookFailed(f"plugin {plugin}: {type(error).__name__}: {error}") from error


async def _mark(plugin: DeliveredThrough, view: TaskView) -> int:
    mark = plugin.delivered_through(view)
    if isinstance(mark, bool) or not isinstance(mark, int):
        raise TypeError(f"delivered_through returned {mark!r}, not a seq")
    return mark

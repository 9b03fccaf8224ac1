"""An example noeta plugin with hooks (docs/plugins.md): it notifies once per finished
task, and keeps an at-least-once ledger of every event.

    plugins:
      - core
      - module: notify_plugin        # on PYTHONPATH, e.g. PYTHONPATH=examples
        params: {outbox: notifications, ledger: /var/lib/noeta/events.log}

- `before_append`: when an append finishes a task, a message to the `outbox` task rides in
  that same append (`view.enqueue`), keyed by the task and the finishing event's seq: a
  crash leaves the finish and its notification both, or neither.
- `on_event`: every event is written to the `ledger` file as `<task> <seq> <type>`, after
  it commits; the plugin records how far it got (`view.record`) and returns that mark
  from `delivered_through`, so a claim after a crash delivers the rest again. A line
  already in the ledger is not written twice: the side effect is keyed by event seq.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from noeta.core.ports.hooks import TaskView
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Delivery
from noeta.core.ports.tool import Tool
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent


class NotifyPlugin:
    name = "notify"

    def __init__(self, outbox: str, ledger: str) -> None:
        self.outbox = outbox
        self.ledger = ledger

    def tools(self) -> Sequence[Tool]:
        return ()

    async def before_append(self, view: TaskView, new: Sequence[events.Event]) -> None:
        for offset, event in enumerate(new, start=view.state.last_seq + 1):
            if isinstance(event, events.TaskFinished) and view.task_id != self.outbox:
                text = f"task {view.task_id} {event.status}"
                key = f"notify:{view.task_id}:{offset}"
                view.enqueue(Delivery(self.outbox, {"text": text}, key))

    async def on_event(self, view: TaskView, event: LoggedEvent) -> None:
        self._write_once(f"{view.task_id} {event.seq} {type(event.event).__name__}")
        view.record({"through": event.seq})

    def delivered_through(self, view: TaskView) -> int:
        mark = view.mark
        through = mark.get("through") if isinstance(mark, dict) else None
        return through if isinstance(through, int) else 0

    def _write_once(self, line: str) -> None:
        """The side effect, keyed by event seq: a line written before is not written again."""
        try:
            with open(self.ledger, encoding="utf-8") as ledger:
                if line in ledger.read().splitlines():
                    return
        except FileNotFoundError:
            pass
        with open(self.ledger, "a", encoding="utf-8") as ledger:
            ledger.write(line + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())


def plugin(params: dict[str, JSONValue]) -> NotifyPlugin:
    outbox, ledger = params.get("outbox"), params.get("ledger")
    if not isinstance(outbox, str) or not outbox or not isinstance(ledger, str) or not ledger:
        raise ValueError("notify needs `outbox` (a task id) and `ledger` (a file path)")
    return NotifyPlugin(outbox, ledger)

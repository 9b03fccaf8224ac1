"""What a person sends a running task through the client: a message, a cancel, an answer
to a call a gate stopped it to ask about; each checked, then delivered to its inbox.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from noeta.client.task_logs import task_row
from noeta.core.errors import ConfigError, NoetaError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import CANCEL_KEY, Delivery, Store, check_key
from noeta.core.ports.store_values import answer_key, check_text
from noeta.core.rules import events
from noeta.core.rules.texts import BUDGET_CALL

# The client's store, opened at first use: only once what was given is checked.
OpenStore = Callable[[], Awaitable[Store]]


async def send(open_store: OpenStore, task_id: str, text: str, key: str | None) -> bool:
    """Send an interactive task a message; False if one with `key` was sent already."""
    key = check_key("message id", key) if key is not None else uuid.uuid4().hex
    check_text("message", text)
    if not text.strip():
        raise ConfigError("a message needs some text")
    store = await open_store()
    record = await task_row(store, task_id)
    if record.status.finished:
        raise NoetaError(f"task {task_id} is {record.status}; it takes no more messages")
    first = (await store.read_log(task_id))[:1]
    created = events.decode(first[0].type, first[0].data) if first else None
    if not (isinstance(created, events.TaskCreated) and created.interactive):
        raise NoetaError(
            f"task {task_id} is one-shot: it takes no messages "
            "(submit it --interactive to converse)"
        )
    return await store.deliver(Delivery(task_id, {"text": text}, f"message:{key}"))


async def cancel(open_store: OpenStore, task_id: str) -> bool:
    """Ask for the task to stop; False if that was asked already."""
    store = await open_store()
    record = await task_row(store, task_id)
    if record.status.finished:
        raise NoetaError(f"task {task_id} is already {record.status}")
    return await store.deliver(Delivery(task_id, {"kind": "cancel"}, CANCEL_KEY))


def check_answer(call: str, decision: str, note: str) -> None:
    if decision not in ("allow", "deny"):
        raise ConfigError(f"decision must be allow or deny, not {decision!r}")
    check_text("call id", call)
    check_text("note", note)


async def answer(open_store: OpenStore, task_id: str, call: str, decision: str, note: str) -> None:
    """Allow or deny the call `call` the task waits on (checked by `check_answer`)."""
    # Lazily: the fold is kept out of the commands that do not read a state (ADR-0056).
    from noeta.core.task_loading import load_state, snapshot_version

    store = await open_store()
    await task_row(store, task_id)
    state = await load_state(store, task_id, snapshot_version())
    if state.waiting_call != call:
        waits = f" (it waits on call {state.waiting_call})" if state.waiting_call else ""
        raise NoetaError(f"task {task_id} is not waiting for an answer on call {call}{waits}")
    payload: dict[str, JSONValue] = {
        "kind": "answer",
        "call_id": call,
        "decision": decision,
        "note": note,
    }
    # A budget asks again at each refusal on the same call id: each question its own key
    # (where its log stood), or the second answer would be dropped as the first's twin.
    key = answer_key(call) + (f":{state.last_seq}" if call == BUDGET_CALL else "")
    if not await store.deliver(Delivery(task_id, payload, dedupe_key=key)):
        raise NoetaError(f"call {call} of task {task_id} was answered already")

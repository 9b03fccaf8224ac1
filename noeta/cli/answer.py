"""`noeta answer`: a person's answer to a tool call a gate stopped to ask about."""

from __future__ import annotations

import asyncio

import click

from noeta.cli.options import store_option
from noeta.core.errors import NoetaError
from noeta.core.payload import JSONValue


@click.command()
@click.argument("task_id")
@click.argument("call_id")
@click.argument("decision", type=click.Choice(["allow", "deny"]))
@click.option("--note", default="", help="Said to the model with the answer.")
@store_option
def answer(task_id: str, call_id: str, decision: str, note: str, store: str | None) -> None:
    """Allow or deny the call CALL_ID that task TASK_ID is waiting on."""
    asyncio.run(_answer(task_id, call_id, decision, note, store))
    click.echo(f"task {task_id}: call {call_id} {'allowed' if decision == 'allow' else 'denied'}")


async def _answer(task_id: str, call_id: str, decision: str, note: str, url: str | None) -> None:
    from noeta.backends.stores import open_store
    from noeta.core.errors import UnknownTask
    from noeta.core.runner.log import load_state, snapshot_version
    from noeta.core.runner.task import answer_key
    from noeta.core.store import Delivery

    store = await open_store(url, application_name="noeta-answer")
    try:
        if await store.get_task(task_id) is None:
            raise UnknownTask(task_id)
        state = await load_state(store, task_id, snapshot_version())
        if state.waiting_call != call_id:
            waits = f" (it waits on call {state.waiting_call})" if state.waiting_call else ""
            raise NoetaError(
                f"task {task_id} is not waiting for an answer on call {call_id}{waits}"
            )
        payload: dict[str, JSONValue] = {
            "kind": "answer",
            "call_id": call_id,
            "decision": decision,
            "note": note,
        }
        if not await store.deliver(Delivery(task_id, payload, dedupe_key=answer_key(call_id))):
            raise NoetaError(f"call {call_id} of task {task_id} was answered already")
    finally:
        await store.close()

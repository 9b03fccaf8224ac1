"""`noeta answer`: a person's answer to a tool call a gate stopped to ask about."""

from __future__ import annotations

import asyncio

import click

from noeta.cli.options import store_option


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
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-answer") as client:
        await client.answer(task_id, call_id, decision, note=note)

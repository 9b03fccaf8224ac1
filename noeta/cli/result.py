"""`noeta result`: a finished task's whole answer, or a job's result, for a person or a
script; how it ended told by the exit code (0 done, 1 failed or cancelled, 2 not yet)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from dataclasses import dataclass

import click

from noeta.cli.options import json_option, store_option
from noeta.cli.text import scrubbed

NOT_FINISHED_EXIT = 2
_FOREVER = "forever"  # --wait given without SECONDS


@dataclass(frozen=True, slots=True)
class Ending:
    """How a task ended, or that it has not: `status` its row's, `text` its answer (a
    job's: its result as JSON text) or its error."""

    status: str
    text: str
    is_job: bool


@click.command()
@click.argument("task_id")
@click.option(
    "--wait",
    "wait",
    is_flag=False,
    flag_value=_FOREVER,
    default=None,
    metavar="[SECONDS]",
    help="If it has not finished: wait for it (at most SECONDS); exit 2 if it still has not.",
)
@json_option
@store_option
def result(task_id: str, wait: str | None, as_json: bool, store: str | None) -> None:
    """Print the whole answer of task TASK_ID, or a job's result; exit 1 if it failed.

    A job's result prints as indented JSON; with --json, as the function returned it
    (raw JSON text), and an agent's answer as a JSON string. A failed or cancelled task
    exits 1 with its error on stderr; one still running exits 2 (or, with --wait, is
    waited for).
    """
    timeout = _wait_seconds(wait)
    ending = asyncio.run(_ending(task_id, store, wait is not None, timeout))
    if ending.status == "done":
        click.echo(_printed(ending, as_json))
        return
    said = " ".join(str(scrubbed(ending.text)).split())
    if ending.status == "failed":
        _fail(f"task {task_id} failed: {said or 'no error recorded'}", 1)
    elif ending.status == "cancelled":
        _fail(f"task {task_id} was cancelled" + (f": {said}" if said else ""), 1)
    elif wait is not None:
        _fail(f"task {task_id} did not finish within {wait}s: it is {ending.status}", 2)
    else:
        hint = f"`noeta result {task_id} --wait` waits for it"
        _fail(f"task {task_id} has not finished: it is {ending.status} ({hint})", 2)


def _fail(message: str, code: int) -> None:
    click.echo(f"noeta: error: {message}", err=True)
    sys.exit(code)


def _wait_seconds(wait: str | None) -> float | None:
    if wait is None or wait == _FOREVER:
        return None
    try:
        seconds = float(wait)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise click.BadParameter(
            f"{wait!r} is not a number of seconds above 0", param_hint="--wait"
        )
    return seconds


def _printed(ending: Ending, as_json: bool) -> str:
    if not ending.is_job:
        return json.dumps(ending.text, ensure_ascii=False) if as_json else ending.text
    if as_json:
        return ending.text
    try:
        return json.dumps(json.loads(ending.text), ensure_ascii=False, indent=2)
    except ValueError:  # a job's result is JSON text; anything else prints as it is
        return ending.text


async def _ending(task_id: str, url: str | None, wait: bool, within: float | None) -> Ending:
    from noeta.client import AsyncClient
    from noeta.client.task_logs import finish_event
    from noeta.core.errors import ResultTimeout, TaskCancelled, TaskFailed
    from noeta.core.ports.store import check_key

    check_key("task id", task_id)
    async with AsyncClient(url, application_name="noeta-result", start_embedded=False) as client:
        record = await client.get(task_id)
        store = await client.store()
        if wait and not record.status.finished:
            # How it ended is told from the row and the log below, as without --wait.
            with contextlib.suppress(TaskFailed, TaskCancelled, ResultTimeout):
                await client.result(task_id, timeout=within)
            record = await client.get(task_id)
        if not record.status.finished:
            return Ending(record.status.value, "", is_job=False)
        finished = await finish_event(store, task_id)
        # A job's log opens with its call (CallRequested, written with its creation).
        views = store.capabilities.views
        if views is not None:
            opening = (await views.log_openings([task_id], 3)).get(task_id, [])
        else:
            opening = await store.read_log(task_id)
        is_job = any(event.type == "CallRequested" for event in opening)
        text = "" if finished is None else finished.answer or finished.error
        return Ending(record.status.value, text, is_job)

"""Tasks that workers run: `submit` one, `send` it a message, list them (`tasks`), follow
one's log (`tail`), and ask for one to stop (`cancel`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC
from typing import Any

import click

from noeta.cli.options import DEFAULT_MODEL, config_option, json_option, store_option
from noeta.cli.text import (
    event_json,
    event_line,
    late_result_json,
    late_result_line,
    read_text,
    task_json,
)
from noeta.client import AsyncClient, TaskHandle
from noeta.config import load_config
from noeta.core.errors import ConfigError, NoetaError
from noeta.core.store import (
    CANCEL_KEY,
    DEFAULT_QUEUE,
    LateResult,
    Store,
    StoredEvent,
    TaskRecord,
    TaskStatus,
    check_key,
)

POLL_SECONDS = 0.5  # how often `tail --follow` looks for new events


@click.command()
@click.argument("prompt", required=False, default="")
@click.option("--queue", default=DEFAULT_QUEUE, show_default=True, help="The queue to run it on.")
@click.option(
    "--interactive",
    is_flag=True,
    help="A conversation: it takes messages (`noeta send`) until it is cancelled.",
)
@click.option(
    "--model",
    "model",
    envvar="NOETA_MODEL",
    default=DEFAULT_MODEL,
    show_default=True,
    help="anthropic:MODEL, openai:MODEL or scripted:FILE.",
)
@click.option("--id", "task_id", default=None, help="The task's id (default: a new one).")
@click.option(
    "--job",
    default=None,
    metavar="NAME",
    help="A plain job instead: one call of the @noeta.tool function NAME (from --config).",
)
@click.option(
    "--input",
    "job_input",
    default=None,
    metavar="JSON",
    help="The job's input, a JSON object (`-` reads it from standard input).",
)
@config_option
@store_option
def submit(
    prompt: str,
    queue: str,
    interactive: bool,
    model: str,
    task_id: str | None,
    job: str | None,
    job_input: str | None,
    config: str | None,
    store: str | None,
) -> None:
    """Create a task for the workers to run; print its id.

    PROMPT `-` reads it from standard input. An --interactive task may start without one;
    given, it is the first message. With --job, the task is a plain job: no model, one
    call of that function with --input, its result the task's.
    """
    if job is not None:
        if prompt or interactive:
            raise ConfigError("a job takes --input, not a prompt nor --interactive")
        arguments = _job_arguments(job_input)
        handle = asyncio.run(_enqueue(store, config, job, arguments, queue, task_id))
        click.echo(handle.id)
        return
    if job_input is not None:
        raise ConfigError("--input is for a job: name it with --job")
    prompt = read_text(prompt, "prompt", blank_ok=True)
    if not prompt.strip() and not interactive:
        raise ConfigError("a one-shot task needs a prompt (or submit it --interactive)")
    handle = asyncio.run(
        _submit(
            store, config, prompt, model=model, queue=queue, id=task_id, interactive=interactive
        )
    )
    click.echo(handle.id)


def _job_arguments(text: str | None) -> dict[str, object]:
    if text is None:
        return {}
    text = read_text(text, "input")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"--input is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError("--input must be a JSON object of the job's arguments")
    return value


async def _submit(url: str | None, config: str | None, prompt: str, **options: Any) -> TaskHandle:
    async with AsyncClient(url, config=config, application_name="noeta-submit") as client:
        return await client.submit(prompt, **options)


async def _enqueue(
    url: str | None,
    config: str | None,
    job: str,
    arguments: dict[str, object],
    queue: str,
    task_id: str | None,
) -> TaskHandle:
    # The config is loaded even when absent (the built-in default): --job finds its
    # function through the plugins it lists.
    settings = load_config(config)
    async with AsyncClient(url, config=settings, application_name="noeta-submit") as client:
        return await client.enqueue(job, arguments, queue=queue, id=task_id)


@click.command()
@click.argument("task_id")
@click.argument("message")
@click.option("--id", "key", default=None, help="Sending twice with one KEY delivers once.")
@store_option
def send(task_id: str, message: str, key: str | None, store: str | None) -> None:
    """Send MESSAGE to task TASK_ID (`-` reads it from standard input)."""
    message = read_text(message, "message")
    key = check_key("message id", key) if key is not None else uuid.uuid4().hex
    delivered = asyncio.run(_send(task_id, message, key, store))
    click.echo("sent" if delivered else "already sent")


async def _send(task_id: str, message: str, key: str, url: str | None) -> bool:
    from noeta.backends.stores import open_store
    from noeta.core.store import Delivery

    store = await open_store(url, application_name="noeta-send")
    try:
        record = await _existing(store, task_id)
        if record.status.finished:
            raise NoetaError(f"task {task_id} is {record.status}; it takes no more messages")
        if not await _interactive(store, task_id):
            raise NoetaError(
                f"task {task_id} is one-shot: it takes no messages "
                "(submit it --interactive to converse)"
            )
        return await store.deliver(Delivery(task_id, {"text": message}, f"message:{key}"))
    finally:
        await store.close()


async def _interactive(store: Store, task_id: str) -> bool:
    """Whether the task takes messages, from its TaskCreated (the log's first event)."""
    from noeta.core import events

    first = (await store.read_log(task_id))[:1]
    if not first:
        return False
    created = events.decode(first[0].type, first[0].data)
    return isinstance(created, events.TaskCreated) and created.interactive


@click.command()
@click.option("--status", type=click.Choice([status.value for status in TaskStatus]), default=None)
@click.option("--queue", default=None, help="Only the tasks of this queue.")
@click.option("--parent", default=None, metavar="ID", help="Only the subtasks task ID launched.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most N tasks."
)
@json_option
@store_option
def tasks(
    status: str | None,
    queue: str | None,
    parent: str | None,
    limit: int,
    as_json: bool,
    store: str | None,
) -> None:
    """List tasks, newest first (with --parent: that task's subtasks, in launch order)."""
    if queue is not None:
        check_key("queue name", queue)
    wanted = None if status is None else TaskStatus(status)
    if parent is not None:
        children = asyncio.run(_children_of(check_key("task id", parent), store))
        records = [
            r
            for _, r in children
            if (wanted is None or r.status == wanted) and (queue is None or r.queue == queue)
        ][:limit]
    else:
        records = asyncio.run(_tasks(wanted, queue, limit, store))
    if as_json:
        click.echo(json.dumps([task_json(r) for r in records], ensure_ascii=False, indent=2))
        return
    if not records:
        click.echo("no tasks")
        return
    rows = [("id", "status", "queue", "epoch", "owner", "updated")]
    for record in records:
        updated = record.updated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        rows.append(
            (
                record.id,
                record.status.value,
                record.queue,
                str(record.owner_epoch),
                record.owner or "-",
                updated,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


async def _tasks(
    status: TaskStatus | None, queue: str | None, limit: int, url: str | None
) -> list[TaskRecord]:
    from noeta.backends.stores import open_store

    store = await open_store(url, application_name="noeta-tasks")
    try:
        return await store.list_tasks(status=status, queue=queue, limit=limit)
    finally:
        await store.close()


@click.command()
@click.argument("task_id")
@click.option(
    "--from",
    "first_seq",
    type=click.IntRange(min=1),
    default=1,
    metavar="SEQ",
    help="Start at the event with this seq.",
)
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Keep printing new events until the task finishes.",
)
@json_option
@store_option
def tail(task_id: str, first_seq: int, follow: bool, as_json: bool, store: str | None) -> None:
    """Print a task's log and, with --follow, its new events until it finishes."""
    try:
        asyncio.run(_tail(task_id, first_seq - 1, follow, as_json, store))
    except KeyboardInterrupt:
        raise SystemExit(130) from None  # stopping a follow is how it is meant to end


async def _tail(task_id: str, after: int, follow: bool, as_json: bool, url: str | None) -> None:
    from noeta.backends.stores import open_store

    store = await open_store(url, application_name="noeta-tail")
    try:
        while True:
            # The status is read before the log: once it says finished, the read that
            # follows holds the last event.
            record = await _existing(store, task_id)
            for event in await store.read_log(task_id, after):
                click.echo(event_json(event) if as_json else event_line(event))
                after = event.seq
            if not follow or record.status.finished:
                return
            await asyncio.sleep(POLL_SECONDS)
    finally:
        await store.close()


@click.command()
@click.argument("task_id")
@store_option
def cancel(task_id: str, store: str | None) -> None:
    """Ask for task TASK_ID to stop: the worker that runs it next finishes it as cancelled."""
    requested = asyncio.run(_cancel(task_id, store))
    click.echo("cancel requested" if requested else "cancel already requested")


async def _cancel(task_id: str, url: str | None) -> bool:
    from noeta.backends.stores import open_store
    from noeta.core.store import Delivery

    store = await open_store(url, application_name="noeta-cancel")
    try:
        record = await _existing(store, task_id)
        if record.status.finished:
            raise NoetaError(f"task {task_id} is already {record.status}")
        return await store.deliver(Delivery(task_id, {"kind": "cancel"}, CANCEL_KEY))
    finally:
        await store.close()


async def _children_of(task_id: str, url: str | None) -> list[tuple[str, TaskRecord]]:
    from noeta.backends.stores import open_store

    store = await open_store(url, application_name="noeta-tasks")
    try:
        await _existing(store, task_id)
        return await _children(store, await store.read_log(task_id))
    finally:
        await store.close()


async def _children(store: Store, log: list[StoredEvent]) -> list[tuple[str, TaskRecord]]:
    """The subtasks a task launched, from its log (each SubtaskLaunched was written with the
    child's creation), with their rows: (description, record), in launch order."""
    from noeta.core import events

    found = []
    for stored in log:
        if stored.type != "SubtaskLaunched":
            continue
        launched = events.decode(stored.type, stored.data)
        if isinstance(launched, events.SubtaskLaunched):
            record = await store.get_task(launched.child_id)
            if record is not None:
                found.append((launched.description, record))
    return found


async def _existing(store: Store, task_id: str) -> TaskRecord:
    from noeta.core.errors import UnknownTask

    record = await store.get_task(task_id)
    if record is None:
        raise UnknownTask(task_id)
    return record


@click.command()
@click.argument("task_id")
@json_option
@store_option
def show(task_id: str, as_json: bool, store: str | None) -> None:
    """Show a task: its state, its subtasks and their states, and its log."""
    record, log, late, children = asyncio.run(_show(task_id, store))
    if as_json:
        document = {
            "task": task_json(record),
            "children": [task_json(child) | {"description": d} for d, child in children],
            "log": [json.loads(event_json(e)) for e in log],
            "late_results": [late_result_json(result, log) for result in late],
        }
        click.echo(json.dumps(document, ensure_ascii=False, indent=2))
        return
    click.echo(
        f"task {record.id}  {record.status.value}  queue={record.queue}  "
        f"epoch={record.owner_epoch}  owner={record.owner or '-'}"
    )
    for description, child in children:
        said = f"  {description}" if description else ""
        click.echo(f"  subtask {child.id}  {child.status.value}{said}")
    for event in log:
        click.echo(event_line(event))
    if late:
        click.echo("late results (a tool's result that came after its claim was gone):")
        for result in late:
            click.echo(late_result_line(result, log))


async def _show(
    task_id: str, url: str | None
) -> tuple[TaskRecord, list[StoredEvent], list[LateResult], list[tuple[str, TaskRecord]]]:
    from noeta.backends.stores import open_store

    store = await open_store(url, application_name="noeta-show")
    try:
        record = await _existing(store, task_id)
        # Late results first: one kept after the log was read would look unrecorded.
        late = await store.late_results(task_id)
        log = await store.read_log(task_id)
        return record, log, late, await _children(store, log)
    finally:
        await store.close()

"""Tasks that workers run: `submit` one, `send` it a message, `show` one, follow one's
log (`tail`), and ask for one to stop (`cancel`); the list is `task_list.py`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import click

from noeta.cli.budget_options import budget_options
from noeta.cli.options import (
    DEFAULT_MODEL,
    config_option,
    json_option,
    progress_option,
    store_option,
)
from noeta.cli.text import (
    StepPrinter,
    event_json,
    late_result_json,
    late_result_line,
    read_text,
    scrubbed,
    task_json,
    unrunnable,
    waiting_json,
    waiting_text,
)
from noeta.core.errors import ConfigError, NoetaError
from noeta.core.ports.store import DEFAULT_QUEUE, TaskStatus, check_key
from noeta.core.ports.store_values import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY
from noeta.core.rules.task_id import check_concurrency_key

if TYPE_CHECKING:  # each command imports the client (and the drivers) when it runs
    from collections.abc import Mapping

    from noeta.client import TaskHandle
    from noeta.client.task_costs import TaskUsage
    from noeta.core.ports.store import LateResult, StoredEvent, TaskRecord


# The client calls that only read: with no store given, they join a running embedded
# server or fail in one line; they never create or start one (issue 25, item 25).
READ_ONLY_METHODS = frozenset({"tasks"})
# How long `tail --follow` waits, once the task finished, for the last reply's final.
STREAM_END_SECONDS = 5.0


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
@click.option(
    "--key",
    default=None,
    metavar="KEY",
    help="Its concurrency key (a tenant, a repository): counted by the queue's --per-key limit.",
)
@click.option(
    "--priority",
    type=click.IntRange(MIN_PRIORITY, MAX_PRIORITY),
    default=DEFAULT_PRIORITY,
    show_default=True,
    help=f"{MIN_PRIORITY}-{MAX_PRIORITY}; higher is claimed first within its queue.",
)
@budget_options
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
    key: str | None,
    priority: int,
    max_cost: str | None,
    max_tokens: int | None,
    on_budget: str,
    config: str | None,
    store: str | None,
) -> None:
    """Create a task for the workers to run; print its id.

    PROMPT `-` reads it from standard input. An --interactive task may start without one;
    given, it is the first message. With --job, the task is a plain job: no model, one
    call of that function with --input, its result the task's.
    """
    from noeta.backends.models.registry import checked_spec

    if key is not None:
        check_concurrency_key(key)
    placing = {"queue": queue, "id": task_id, "key": key, "priority": priority}
    if job is not None:
        if max_cost is not None or max_tokens is not None:
            raise ConfigError("a job calls no model: --max-cost and --max-tokens are for agents")
        if prompt or interactive:
            raise ConfigError("a job takes --input, not a prompt nor --interactive")
        arguments = _job_arguments(job_input)
        handle = asyncio.run(_enqueue(store, config, job, arguments, placing))
        click.echo(handle.id)
        return
    if job_input is not None:
        raise ConfigError("--input is for a job: name it with --job")
    prompt = read_text(prompt, "prompt", blank_ok=True)
    if not prompt.strip() and not interactive:
        raise ConfigError("a one-shot task needs a prompt (or submit it --interactive)")
    # The worker holds the API keys: only the spec's form is checked here, and a
    # relative script path is made absolute (the worker's folder is not the submitter's);
    # a script is read as `noeta run` reads it.
    model = checked_spec(model)
    handle = asyncio.run(
        _submit(
            store,
            config,
            prompt,
            model=model,
            interactive=interactive,
            max_cost=max_cost,
            max_tokens=max_tokens,
            on_budget=on_budget,
            **placing,
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
    from noeta.client import AsyncClient

    if config is not None:  # read only to refuse a --config that cannot be: no plugin starts
        from noeta.config import load_config

        load_config(config)
    async with AsyncClient(url, config=config, application_name="noeta-submit") as client:
        return await client.submit(prompt, **options)


async def _enqueue(
    url: str | None,
    config: str | None,
    job: str,
    arguments: dict[str, object],
    placing: dict[str, Any],
) -> TaskHandle:
    from noeta.client import AsyncClient
    from noeta.config import load_config

    # The config is loaded even when absent (the built-in default): --job finds its
    # function through the plugins it lists.
    settings = load_config(config)
    async with AsyncClient(url, config=settings, application_name="noeta-submit") as client:
        return await client.enqueue(job, arguments, **placing)


@click.command()
@click.argument("task_id")
@click.argument("message")
@click.option("--id", "key", default=None, help="Sending twice with one KEY delivers once.")
@store_option
def send(task_id: str, message: str, key: str | None, store: str | None) -> None:
    """Send MESSAGE to task TASK_ID (`-` reads it from standard input)."""
    message = read_text(message, "message")
    key = check_key("message id", key) if key is not None else None
    delivered = asyncio.run(_client_call(store, "noeta-send", "send", task_id, message, key=key))
    click.echo("sent" if delivered else "already sent")


async def _client_call(url: str | None, name: str, method: str, *args: Any, **options: Any) -> Any:
    """One call of the client, as the command's whole body: the CLI is a layer on it."""
    from noeta.client import AsyncClient

    reads_only = method in READ_ONLY_METHODS
    async with AsyncClient(url, application_name=name, start_embedded=not reads_only) as client:
        return await getattr(client, method)(*args, **options)


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
@progress_option
@json_option
@store_option
def tail(
    task_id: str,
    first_seq: int,
    follow: bool,
    show_progress: bool,
    as_json: bool,
    store: str | None,
) -> None:
    """Print a task's log and, with --follow, its new events until it finishes.

    Under the events, a status line on stderr (when stderr is a terminal) says what the
    task is doing: its turn, the model call or tool in flight, a wait, a takeover.
    Exits 1 if the task failed or was cancelled (so a script can tell), 0 otherwise.
    """
    try:
        status = asyncio.run(_tail(task_id, first_seq - 1, follow, as_json, store, show_progress))
    except KeyboardInterrupt:
        raise SystemExit(130) from None  # stopping a follow is how it is meant to end
    if status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        click.echo(f"task {task_id}: {status}", err=True)
        raise SystemExit(1)


async def _tail(
    task_id: str, after: int, follow: bool, as_json: bool, url: str | None, progress: bool
) -> TaskStatus:
    from noeta.cli.progress import Written
    from noeta.cli.reply_printer import ReplyPrinter, print_stream
    from noeta.cli.status_line import open_status, shown
    from noeta.client import AsyncClient

    line = open_status(progress, at_once=False)
    steps = StepPrinter()
    replies = ReplyPrinter(line)
    client = AsyncClient(url, application_name="noeta-tail", start_embedded=False)
    async with client, shown(line):
        streaming = None
        streams = (await client.store()).capabilities.reply_streams
        if follow and not as_json and streams is not None:  # text as it streams
            streaming = asyncio.ensure_future(print_stream(client.stream(task_id), replies))
        # The whole log is read, even when fewer events print: the status line folds it
        # (a worker's view), and a step reads the ones before it (a latency, a takeover).
        try:
            async for tailed in client.tail(task_id, after=0, follow=follow):
                stored = tailed.stored
                printed = None
                if as_json and tailed.seq > after:
                    printed = event_json(stored)
                elif not as_json:
                    printed = "\n".join(steps.lines(stored, shown=tailed.seq > after)) or None
                written = Written(
                    tailed.seq, tailed.event, stored.created_at, stored.epoch, stored.owner
                )
                if printed is not None:
                    replies.break_line()
                line.add(written, above=printed)
            if streaming is not None:  # its last text: the final follows the reply's step
                with contextlib.suppress(TimeoutError, NoetaError):
                    await asyncio.wait_for(asyncio.shield(streaming), STREAM_END_SECONDS)
        finally:
            if streaming is not None:
                streaming.cancel()
                with contextlib.suppress(asyncio.CancelledError, NoetaError):
                    await streaming
        return (await client.get(task_id)).status


@click.command()
@click.argument("task_id")
@store_option
def cancel(task_id: str, store: str | None) -> None:
    """Ask for task TASK_ID to stop: it ends cancelled, a running async call stopped.

    A call running now is cancelled if it is async; a sync function with a time limit (in
    a process of its own) gets SIGTERM, then SIGKILL 5 s later; one in a thread cannot be
    stopped and runs to its end. The task's finish says which: "cancelled while running:
    stopped" or "…: it had finished".
    """
    requested = asyncio.run(_client_call(store, "noeta-cancel", "cancel", task_id))
    said = "cancel requested" if requested else "cancel already requested"
    click.echo(f"{said}; `noeta show {task_id}` tells what it stopped")


@click.command()
@click.argument("task_id")
@json_option
@config_option
@store_option
def show(task_id: str, as_json: bool, config: str | None, store: str | None) -> None:
    """Show a task: its state, its subtasks and their states, what it cost (its subtasks
    included, at the config's prices), and its log."""
    from noeta.client.task_costs import summary_lines, usage_json

    record, log, late, children, waits, usage, silent = asyncio.run(_show(task_id, store, config))
    if as_json:
        document = {
            "task": task_json(record) | waiting_json(waits.get(record.id)),
            "usage": usage_json(usage),
            "children": [task_json(child) | {"description": d} for d, child in children],
            "log": [json.loads(event_json(e)) for e in log],
            "late_results": [late_result_json(result, log) for result in late],
        }
        click.echo(json.dumps(document, ensure_ascii=False, indent=2))
        return
    click.echo(
        f"task {record.id}  {record.status.value}{waiting_text(waits.get(record.id))}  "
        f"queue={record.queue}  "
        f"epoch={record.owner_epoch}  owner={record.owner or '-'}"
    )
    for description, child in children:
        said = f"  {description}" if description else ""
        click.echo(f"  subtask {child.id}  {child.status.value}{said}")
    click.echo("\n".join(summary_lines(usage)))
    steps = StepPrinter()
    for event in log:
        click.echo("\n".join(steps.lines(event)))
    if silent:  # the latest claim wrote nothing: who held the task, and why it let go
        click.echo(f"      ── {scrubbed(silent)}")
    if late:
        click.echo("late results (a tool's result that came after its claim was gone):")
        for result in late:
            click.echo(late_result_line(result, log))


async def _show(
    task_id: str, url: str | None, config: str | None
) -> tuple[
    TaskRecord,
    list[StoredEvent],
    list[LateResult],
    list[tuple[str, TaskRecord]],
    Mapping[str, tuple[str, ...]],
    TaskUsage,
    str,
]:
    from noeta.client import AsyncClient
    from noeta.config import load_config

    settings = load_config(config)  # a bad price table fails before the store is opened
    async with AsyncClient(
        url, config=settings, application_name="noeta-show", start_embedded=False
    ) as client:
        record = await client.get(task_id)
        store = await client.store()
        # Late results first: one kept after the log was read would look unrecorded.
        late = await store.late_results(task_id)
        log = await store.read_log(task_id)
        children = await client.children(task_id)
        usage = await client.usage(task_id)
        from noeta.silent_claims import silent_claim_words

        logged_epoch = max((event.epoch for event in log), default=0)
        silent = await silent_claim_words(store, record, logged_epoch)
        waits = await unrunnable(store, [record])
        return record, log, late, children, waits, usage, silent

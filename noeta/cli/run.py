"""`noeta run` (a one-shot task, run here to its end) and `noeta show` (a task and its log)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from typing import TYPE_CHECKING

import click

from noeta.cli import bounds
from noeta.cli.nondumpable import make_non_dumpable
from noeta.cli.options import (
    DEFAULT_MODEL,
    config_option,
    json_option,
    progress_option,
    store_option,
)
from noeta.cli.text import read_text
from noeta.core.errors import ConfigError, NoetaError

if TYPE_CHECKING:  # `noeta run --help` imports neither the runner nor the tools
    from noeta.cli.status_line import NoStatus
    from noeta.config import Config
    from noeta.core.ports.store import Claim, Store
    from noeta.core.runner.task import RunResult, TaskRunner

RUN_LEASE_SECONDS = 30.0
# The queue `noeta run` creates its task in. No worker serves it unless told to, so none
# can claim the task between its creation and this process's claim (ADR-0037). A run
# that dies leaves its task here: `noeta worker --queues noeta-run` finishes such tasks.
RUN_QUEUE = "noeta-run"


def retried_where(queue: str) -> str:
    """What `noeta retry` says of where its task waits; for this queue, how it runs."""
    if queue != RUN_QUEUE:
        return f"queued in {queue}"
    return (
        f"queued in {queue}, which only a worker serving it runs: `noeta worker --queues "
        f"{queue}`, or retry it with --queue default"
    )


@click.command()
@click.argument("prompt")
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
    "--lease",
    "lease_seconds",
    type=bounds.LEASE,
    default=RUN_LEASE_SECONDS,
    show_default=True,
    help="Seconds this process holds the task without renewing it.",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="Print the answer only: no status line, no last line."
)
@progress_option
@json_option
@config_option
@store_option
def run(
    prompt: str,
    model: str,
    task_id: str | None,
    lease_seconds: float,
    quiet: bool,
    show_progress: bool,
    as_json: bool,
    config: str | None,
    store: str | None,
) -> None:
    """Run a one-shot task in this process until it ends; print its answer.

    PROMPT `-` reads the prompt from standard input. The task is created in the queue
    `noeta-run`, which workers do not serve unless asked, so no worker takes it. While it
    runs, a status line on stderr (when stderr is a terminal) says its turn, the model
    call or tool in flight, and any retry; standard output holds only the answer.
    """
    prompt = read_text(prompt, "prompt")
    make_non_dumpable()  # tools run in this process: they must not reach its secrets
    from noeta.backends.models.registry import stored_spec
    from noeta.cli.status_line import open_status
    from noeta.config import load_config
    from noeta.core.ports.store import check_lease
    from noeta.core.ports.store_values import check_text
    from noeta.core.rules.task_id import check_task_id

    check_text("prompt", prompt)  # before anything is written: the client's check
    check_lease(lease_seconds)
    model = stored_spec(model)  # the task's log names the script wherever it is read
    task_id = check_task_id(task_id) if task_id is not None else uuid.uuid4().hex[:12]
    settings = load_config(config)
    line = open_status(show_progress and not quiet, at_once=True)
    try:
        status, answer, error = asyncio.run(
            line.showing(_run(prompt, model, task_id, lease_seconds, settings, store, line))
        )
    except KeyboardInterrupt:
        click.echo(
            f"noeta: interrupted: task {task_id} is left in the queue {RUN_QUEUE}, where "
            f"`noeta worker --queues {RUN_QUEUE}` finishes it (or `noeta cancel {task_id}`)",
            err=True,
        )
        raise SystemExit(130) from None
    if as_json:
        document = {"id": task_id, "status": status, "answer": answer, "error": error}
        click.echo(json.dumps(document, ensure_ascii=False))
    elif answer:
        click.echo(answer)
    if not quiet:
        click.echo(f"task {task_id}: {status}" + (f" ({error})" if error else ""), err=True)
    if status != "done":
        raise SystemExit(1)


async def _run(
    prompt: str,
    model: str,
    task_id: str,
    lease: float,
    config: Config,
    url: str | None,
    line: NoStatus,
) -> tuple[str, str, str]:
    from noeta import observability
    from noeta.backends.models.registry import ProviderRegistry, check_script
    from noeta.backends.stores import open_store, resolve_url
    from noeta.core import failpoints
    from noeta.core.ports.model_limits import ModelBudgetWait
    from noeta.core.ports.store import NewEvent, NewTask
    from noeta.core.rules import events
    from noeta.core.runner import task_budget
    from noeta.observability import observed
    from noeta.plugins.tool_environment import PASSED_NAMES
    from noeta.plugins.toolbox import Toolbox
    from noeta.worker.presence import offers_of

    providers = ProviderRegistry()
    check_script(model)  # the person's own script: say in full what is wrong with it
    await providers.provider_for(model)  # a bad spec or a missing key: fail before writing
    observability.start("noeta-run", secrets=[resolve_url(url)])
    task_budget.price_with(config.prices)  # as the worker prices: budgets, cost counter
    toolbox = await Toolbox.open(config, runs_tools=True)
    observability.add_passed_secrets(PASSED_NAMES)  # what its tools may print
    # Through the status line (when shown), which follows each event the run writes.
    store = line.follow(observed(await open_store(url, application_name="noeta-run")))
    try:
        created = events.TaskCreated(model=model, prompt=prompt, tools=tuple(toolbox.tools))
        first = [NewEvent(*events.encode(created))]
        if not await store.create_task(NewTask(task_id, first, queue=RUN_QUEUE)):
            raise ConfigError(f"a task with id {task_id!r} exists already")
        await failpoints.hit("run.after_create")
        worker = f"run-{socket.gethostname()}-{os.getpid()}"
        runner = toolbox.runner(store, providers)
        while True:
            claim = await store.claim_task(worker, task_id, lease, offers=offers_of(runner.pins))
            if claim is None:
                raise NoetaError(f"task {task_id} was claimed by a worker before this process")
            try:
                result = await _run_claimed(store, runner, claim, lease)
                break
            except ModelBudgetWait as wait:
                # A shared limit handed the task back (ADR-0075): this process is its
                # worker, so it waits for the budget's moment and claims it again.
                seconds = (wait.until - await store.clock()).total_seconds()
                await asyncio.sleep(max(0.0, seconds) + 0.01)  # past it, not a hair before
        state = result.state
        return state.finished or result.outcome, state.last_answer, state.last_turn_error
    finally:
        await providers.close()
        await store.close()
        await toolbox.close()
        observability.shutdown()


async def _run_claimed(store: Store, runner: TaskRunner, claim: Claim, lease: float) -> RunResult:
    """Run the claimed task here, renewing its claim, until it ends or is handed back."""
    from noeta import observability
    from noeta.worker.renewal import Renewer

    runner_task = asyncio.ensure_future(runner.run(claim))
    lost_claim = asyncio.Event()

    def stop_running(lost: object) -> None:
        lost_claim.set()
        observability.claim_lost(claim.task_id)  # its spans are the next claimer's to report
        runner_task.cancel()

    renewer = Renewer(store, lease, stop_running)
    renewer.add(claim)
    renewing = asyncio.ensure_future(renewer.run())
    try:
        return await runner_task
    except asyncio.CancelledError:
        if not lost_claim.is_set():  # Ctrl-C: hand the task back for a worker, at once
            await store.release(claim)
            raise
        raise NoetaError(
            f"lost the claim on task {claim.task_id}; a worker may finish it"
        ) from None
    finally:
        renewing.cancel()

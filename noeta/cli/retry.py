"""`noeta retry`: one failed or cancelled task run again as a new task (`--force`: a done
one too), or every task of a status, queue and age retried in batches (`--status`),
counted first with `--dry-run`; a bulk run cut anywhere is run again to go on."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from noeta.cli.options import store_option
from noeta.core.errors import ConfigError

if TYPE_CHECKING:
    from noeta.client.bulk_actions import BulkOutcome, Selection
    from noeta.client.handles import TaskHandle

BATCH_DEFAULT = 500
INTERRUPTED_EXIT = 130
# What only a bulk retry takes: named when given with a TASK_ID instead.
_BULK_ONLY = ("--since", "--limit", "--dry-run", "--name", "--error")


@click.command()
@click.argument("task_id", required=False)
@click.option("--id", "new_id", default=None, help="The new task's id (default: TASK_ID.retry-1).")
@click.option(
    "--force", is_flag=True, help="Run TASK_ID again even if it is done (a running one: never)."
)
@click.option(
    "--status",
    default=None,
    metavar="STATUS",
    help="Instead of one task: retry every failed (or cancelled) task, newest first.",
)
@click.option(
    "--queue",
    default=None,
    help="With --status: only the tasks of this queue. With TASK_ID: the new task's queue "
    "(default: TASK_ID's).",
)
@click.option(
    "--since",
    default=None,
    metavar="DURATION",
    help="With --status: only tasks that finished this recently (30m, 1h, 2d).",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="With --status: the newest N only."
)
@click.option("--name", "job", default=None, metavar="JOB", help="With --status: jobs of JOB only.")
@click.option(
    "--error",
    "error_kind",
    default=None,
    metavar="KIND",
    help="With --status: only those that ended with this kind of error (a group of "
    "`noeta tasks --status failed --group-by error`).",
)
@click.option("--dry-run", is_flag=True, help="With --status: count them and retry nothing.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 1000),
    default=BATCH_DEFAULT,
    show_default=True,
    help="With --status: retries made per transaction.",
)
@store_option
def retry(
    task_id: str | None,
    new_id: str | None,
    force: bool,
    status: str | None,
    queue: str | None,
    since: str | None,
    limit: int | None,
    job: str | None,
    error_kind: str | None,
    dry_run: bool,
    batch_size: int,
    store: str | None,
) -> None:
    """Run failed or cancelled task TASK_ID again, as a new task; print its id.

    A job's new task has its function, input, queue (or --queue's), concurrency key and
    priority, and its log names TASK_ID (`retry_of`); where it waits is said on stderr (a
    task of `noeta run` was in noeta-run, which only `noeta worker --queues noeta-run`
    serves). An agent task is forked at its last good step (`noeta fork`): nothing
    before it runs again. TASK_ID stays as it ended. A task still queued or running is
    refused; a done one too, unless --force. The new id is TASK_ID.retry-1 (a retry's
    retry: .retry-2), or a new one if TASK_ID was retried before.

    With --status failed (or cancelled) instead of TASK_ID: every such task (of --queue,
    finished within --since, the newest --limit) is retried, in batches, with progress on
    standard error. A task retried already is skipped, so a run that was interrupted is
    run again to go on, and two at once make one retry a task. --dry-run prints how many
    match. None matching is one line and exit 0; a task that cannot be retried (no step
    to run again from) is named, and the exit is 1.
    """
    given = {
        "--queue": queue,
        "--since": since,
        "--limit": limit,
        "--dry-run": dry_run or None,
        "--name": job,
        "--error": error_kind,
    }
    if task_id is not None:
        if status is not None:
            raise ConfigError("give a TASK_ID or --status, not both")
        extra = [name for name in _BULK_ONLY if given[name] is not None]
        if extra:
            raise ConfigError(
                f"{extra[0]} selects tasks with --status; it does not go with a TASK_ID"
            )
        from noeta.cli.run import retried_where  # each command's module imports no other's

        handle = asyncio.run(_one(store, task_id, new_id, force, queue))
        click.echo(handle.id)
        click.echo(retried_where(handle.queue), err=True)
        return
    if status is None:
        raise ConfigError("give a TASK_ID to retry, or --status failed (or cancelled)")
    if new_id is not None or force:
        raise ConfigError(f"{'--id' if new_id else '--force'} is for one TASK_ID, not --status")
    from noeta.client.retry_calls import retry_selection
    from noeta.core.ports.retention import parse_duration

    age = None if since is None else parse_duration(since)
    # A bad one before any store opens.
    selection = retry_selection(status, queue, age, None, limit, job, error_kind)
    _bulk(store, selection, dry_run, batch_size)


async def _one(
    url: str | None, task_id: str, new_id: str | None, force: bool, queue: str | None
) -> TaskHandle:
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-retry") as client:
        return await client.retry(task_id, id=new_id, force=force, queue=queue)


def _bulk(url: str | None, selection: Selection, dry_run: bool, batch_size: int) -> None:
    so_far: list[BulkOutcome] = []

    def progress(outcome: BulkOutcome) -> None:
        so_far[:] = [outcome]
        click.echo(f"retried {_counts(outcome)}", err=True)

    async def run() -> BulkOutcome:
        from noeta.client import AsyncClient

        async with AsyncClient(url, application_name="noeta-retry") as client:
            return await client.retry_many(
                status=selection.status,
                queue=selection.queue,
                since=selection.since,
                limit=selection.limit,
                job=selection.where.job,
                error_kind=selection.where.error_kind,
                dry_run=dry_run,
                batch_size=batch_size,
                progress=progress,
            )

    try:
        outcome = asyncio.run(run())
    except KeyboardInterrupt:
        done = so_far[0].done if so_far else 0
        click.echo(
            f"noeta: interrupted after {done:,} retries: run the same command again to go "
            "on (no task is retried twice)",
            err=True,
        )
        raise SystemExit(INTERRUPTED_EXIT) from None
    status, where = selection.status.value, _described(selection)
    if not outcome.matched:
        click.echo(f"no {status} task{where} matches: nothing to retry")
        return
    if dry_run:
        shown = ", ".join(outcome.sample)
        more = ", …" if outcome.matched > len(outcome.sample) else ""
        click.echo(
            f"{outcome.matched:,} {status} task{_s(outcome.matched)}{where} would be retried "
            f"(any retried already will be skipped): {shown}{more}"
        )
        return
    click.echo(f"retried {_counts(outcome)}")
    from noeta.cli.run import RUN_QUEUE  # each command's module imports no other's

    if RUN_QUEUE in outcome.queues:  # tasks `noeta run` started: no default worker runs them
        click.echo(
            f"noeta: retries of tasks `noeta run` started wait in {RUN_QUEUE}, which only "
            f"`noeta worker --queues {RUN_QUEUE}` serves",
            err=True,
        )
    for _, why in outcome.refusals:
        click.echo(f"noeta: not retried: {why}", err=True)
    if outcome.refused:
        raise SystemExit(1)


def _described(selection: Selection) -> str:
    said = f" of job {selection.where.job}" if selection.where.job else ""
    if selection.where.error_kind:
        said += f" that ended with a {selection.where.error_kind}"
    return said + (f" in queue {selection.queue}" if selection.queue else "")


def _counts(outcome: BulkOutcome) -> str:
    said = f"{outcome.done:,} of {outcome.matched:,}"
    if outcome.skipped:
        said += f"; {outcome.skipped:,} skipped (retried already)"
    if outcome.refused:
        said += f"; {outcome.refused:,} could not be"
    return said


def _s(count: int) -> str:
    return "" if count == 1 else "s"

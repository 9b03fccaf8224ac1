"""`noeta fork`: a new task from another's log through one step, with one change."""

from __future__ import annotations

import asyncio
from typing import TextIO

import click

from noeta.cli.options import store_option
from noeta.cli.text import read_text


@click.command()
@click.argument("task_id")
@click.option("--at", "seq", type=int, required=True, help="The seq to fork after.")
@click.option("--id", "new_id", default=None, help="The fork's id (default: a new one).")
@click.option(
    "--message", default=None, help="A user message to continue with (`-`: standard input)."
)
@click.option(
    "--reply-file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="A model reply (JSON) replacing the one at --at.",
)
@click.option("--model", default=None, help="Another model for the calls that follow.")
@click.option("--queue", default=None, help="The fork's queue (default: the task's).")
@click.option(
    "--workspace",
    type=click.Choice(("fresh", "copy")),  # forking.WORKSPACE_CHOICES, not imported: the fold
    default="fresh",
    show_default=True,
    help="fresh: an empty workspace; copy: a copy of the task's files as they are when the "
    "fork first runs (not as they were at --at: files are not versioned by the log).",
)
@store_option
def fork(
    task_id: str,
    seq: int,
    new_id: str | None,
    message: str | None,
    reply_file: TextIO | None,
    model: str | None,
    queue: str | None,
    workspace: str,
    store: str | None,
) -> None:
    """Fork task TASK_ID after step --at: a new task runs on from there; print its id.

    Nothing up to --at runs again: no model call is re-sent, no tool re-runs. The fork
    may change one thing: a new --message (where a turn ended), the model's reply at --at
    (--reply-file), or the --model of the calls that follow. A running task may be
    forked: the fork copies what is committed.

    Files are not versioned by the log. With --workspace fresh (the default) the fork
    starts with no files. With --workspace copy the worker that first runs the fork
    copies the task's workspace as it is then, not as it was at --at; a git workspace
    becomes a worktree of the same repository on a new branch fork/<new id>. The copy
    needs the task's workspace on that worker's host: without it the fork fails, saying
    so. Links are copied as links; FIFOs, sockets and devices are left out.
    """
    from noeta.backends.models.registry import checked_spec
    from noeta.client import AsyncClient

    text = None if message is None else read_text(message, "message")
    reply = None if reply_file is None else reply_file.read()
    spec = None if model is None else checked_spec(model)

    async def forked() -> str:
        async with AsyncClient(store, application_name="noeta-fork") as client:
            handle = await client.fork(
                task_id,
                seq,
                id=new_id,
                message=text,
                reply=reply,
                model=spec,
                queue=queue,
                workspace=workspace,
            )
            return handle.id

    click.echo(asyncio.run(forked()))

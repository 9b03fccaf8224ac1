"""The table of noeta's commands: the module each lives in and the line `noeta --help`
shows for it, so that listing the commands imports none of them (ADR-0056).

A command's module is imported only when that command runs or shows its help; each
module imports its heavy dependencies (the worker, the runner, the tools, the drivers)
inside the functions that use them. tests/cli/test_cli_imports.py holds both rules.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

from noeta.cli.environment import describe_environment


class LazyCommand(NamedTuple):
    """Where a command lives (`module:attribute`) and its first sentence of help."""

    where: str
    summary: str


# The summary is the command's own first sentence: tests/cli/test_cli_imports.py
# compares them.
COMMANDS: dict[str, LazyCommand] = {
    "answer": LazyCommand(
        "noeta.cli.answer:answer",
        "Allow or deny the call CALL_ID that task TASK_ID is waiting on.",
    ),
    "cancel": LazyCommand(
        "noeta.cli.tasks:cancel",
        "Ask for task TASK_ID to stop: it ends cancelled, a running async call stopped.",
    ),
    "cron": LazyCommand(
        "noeta.cli.cron:cron", "Cron files: the schedules `noeta scheduler` fires."
    ),
    "budget": LazyCommand(
        "noeta.cli.budgets:budget",
        "Fleet budgets: USD a queue (or one key of it) may spend per hour, day or month.",
    ),
    "db": LazyCommand(
        "noeta.cli.db:db",
        "The store's schema, and the embedded PostgreSQL server in $NOETA_HOME.",
    ),
    "export": LazyCommand(
        "noeta.cli.replay:export",
        "Write task logs as JSON lines: one event a line, as stored, byte for byte.",
    ),
    "fork": LazyCommand(
        "noeta.cli.fork:fork",
        "Fork task TASK_ID after step --at: a new task runs on from there; print its id.",
    ),
    "limit": LazyCommand(
        "noeta.cli.limits:limit",
        "Shared model-call limits: requests and tokens per minute, for every worker at once.",
    ),
    "queue": LazyCommand(
        "noeta.cli.queues:queue",
        "Queues' fleet-wide limits: concurrency, per key, rate, pause.",
    ),
    "replay": LazyCommand(
        "noeta.cli.replay:replay",
        "Fold task logs with this noeta and say where it parts from one; exit 1 if any.",
    ),
    "result": LazyCommand(
        "noeta.cli.result:result",
        "Print the whole answer of task TASK_ID, or a job's result; exit 1 if it failed.",
    ),
    "retry": LazyCommand(
        "noeta.cli.retry:retry",
        "Run failed or cancelled task TASK_ID again, as a new task; print its id.",
    ),
    "run": LazyCommand(
        "noeta.cli.run:run",
        "Run a one-shot task in this process until it ends; print its answer.",
    ),
    "scheduler": LazyCommand(
        "noeta.cli.scheduler:scheduler",
        "Fire the cron files' schedules, once per slot however many schedulers run, and "
        "wake idle workers when a timer falls due; with --retain, prune finished tasks.",
    ),
    "send": LazyCommand(
        "noeta.cli.tasks:send",
        "Send MESSAGE to task TASK_ID (`-` reads it from standard input).",
    ),
    "show": LazyCommand(
        "noeta.cli.tasks:show",
        "Show a task: its state, its subtasks and their states, what it cost (its "
        "subtasks included, at the config's prices), and its log.",
    ),
    "submit": LazyCommand(
        "noeta.cli.tasks:submit", "Create a task for the workers to run; print its id."
    ),
    "tail": LazyCommand(
        "noeta.cli.tasks:tail",
        "Print a task's log and, with --follow, its new events until it finishes.",
    ),
    "tasks": LazyCommand(
        "noeta.cli.task_list:tasks",
        "List tasks, newest first (with --parent: that task's subtasks, in launch order).",
    ),
    "web": LazyCommand(
        "noeta.cli.web:web",
        "Watch and steer tasks in a browser: the task list, each task's log as a live "
        "timeline (takeovers and recoveries marked), workers and cron; cancel a task, send "
        "a message, answer a gate.",
    ),
    "worker": LazyCommand(
        "noeta.cli.worker:worker",
        "Claim tasks from the queues and run them until SIGTERM or SIGINT.",
    ),
    "workers": LazyCommand(
        "noeta.cli.workers:workers",
        "List the live workers: host, pid, version, queues, tasks held, processed, failed.",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands come from COMMANDS, imported one at a time on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands or name not in COMMANDS:
            return self.commands.get(name)
        module, attribute = COMMANDS[name].where.split(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{COMMANDS[name].where} is not a click command")
        describe_environment(command, f"noeta {name}")
        self.add_command(command, name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing from the table's summaries, cut as click cuts a command's own."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            entry = COMMANDS.get(name)
            # A stand-in command carries the summary: click cuts it as it cuts the real one.
            shown = click.Command(name, help=entry.summary) if entry else self.commands[name]
            rows.append((name, shown.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

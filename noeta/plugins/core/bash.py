"""Bash: one shell command in the workspace, in its own process group, with a deadline,
confined to the files its confinement allows (confinement.py).

The whole group is killed on timeout, on cancellation (the worker lost its claim) and when
the shell exits, so a call leaves nothing running in its group. Output keeps head and tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import (
    BackgroundJob,
    OutputHook,
    ToolContext,
    ToolError,
    ToolFlags,
    ToolOutput,
)
from noeta.plugins.core.arguments import Arguments
from noeta.plugins.core.command_output import OutputCapture, read_pipes
from noeta.plugins.core.confinement import Confinement
from noeta.plugins.core.sandbox import proxy_environment, serve_proxy
from noeta.plugins.core.workspace import workspace_root
from noeta.plugins.tool_environment import tool_environment

DEFAULT_TIMEOUT_SECONDS = 120.0
MAX_TIMEOUT_SECONDS = 600.0
BACKGROUND_TIMEOUT_SECONDS = 3600.0
DEFAULT_OUTPUT_CAP_CHARS = 30_000
# After the group is killed, how long to wait for a process that left it (setsid) and still
# holds the output pipe open; its output after that is dropped rather than awaited.
DRAIN_SECONDS = 5.0
TMPDIR_NAME = ".tmp"  # the task's TMPDIR, inside its workspace: the one place it may write
NOT_STARTED = 126  # the shell's code for a command that could not be run

_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command, run by bash -c."},
        "timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_TIMEOUT_SECONDS,
            "description": "Kill the command after this long. Default "
            f"{DEFAULT_TIMEOUT_SECONDS:g}, at most {MAX_TIMEOUT_SECONDS:g}.",
        },
        "run_in_background": {
            "type": "boolean",
            "description": "Start it as a background job and return at once; its exit code "
            "and output arrive as a message when it ends (the turn may end meanwhile). "
            f"A background job may run up to {BACKGROUND_TIMEOUT_SECONDS:g} s.",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}


class Bash:
    name = "Bash"
    input_schema = _SCHEMA
    flags = ToolFlags(retry_safe=False)  # a command may do anything, so never twice unasked

    def __init__(
        self,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        output_cap_chars: int = DEFAULT_OUTPUT_CAP_CHARS,
        pass_env: Sequence[str] = (),
        confinement: Confinement | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.output_cap_chars = output_cap_chars
        self.pass_env = tuple(pass_env)  # worker variables the operator lets commands see
        self.confinement = confinement or Confinement()
        self.description = (
            "Run a shell command (bash -c) in the workspace directory; stdout and stderr "
            "come back together, with the exit code. Commands get no input. The command is "
            f"killed after timeout_seconds (default {timeout_seconds:g}), together with "
            "every process it started; processes still running when it ends are stopped "
            f"too. Output over {output_cap_chars:,} characters keeps its start and end."
        )

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        command = args.string("command")
        timeout = args.number("timeout_seconds", self.timeout_seconds, MAX_TIMEOUT_SECONDS)
        root = await asyncio.to_thread(workspace_root, ctx)
        environment = await asyncio.to_thread(self._environment, root)
        if args.boolean("run_in_background", False):
            # Nothing runs here: the runner records the job with this call's result and
            # only then has the worker start it (see noeta.worker.jobs).
            job = BackgroundJob(
                command, str(root), BACKGROUND_TIMEOUT_SECONDS, environment, self.confinement
            )
            started = (
                f"Started in the background as job {ctx.call_id}. Its exit code and "
                "output will arrive as a message when it ends."
            )
            return ToolOutput(started, background=job)
        finished = await run_command(
            command, str(root), timeout, self.output_cap_chars, environment, self.confinement,
            ctx.on_output,
        )  # fmt: skip
        return finished.output()

    def _environment(self, root: Path) -> dict[str, str]:
        """The allowlisted environment, HOME the workspace, TMPDIR a folder inside it, and
        PATH without the folders a confined command could not run programs from."""
        tmpdir = root / TMPDIR_NAME
        with contextlib.suppress(FileExistsError):
            tmpdir.mkdir()  # never follows a link: one planted there is the command's problem
        environment = tool_environment(str(root), self.pass_env, str(tmpdir))
        environment["PATH"] = self.confinement.search_path(environment["PATH"], str(root))
        return environment | proxy_environment(self.confinement.network_mode())


@dataclass(frozen=True, slots=True)
class Finished:
    text: str
    returncode: int | None  # None: killed at the deadline
    timeout_seconds: float
    stragglers_stopped: bool
    output_abandoned: bool

    def output(self) -> ToolOutput:
        notes: list[str] = []
        if self.returncode is None:
            notes.append(
                f"[timed out after {self.timeout_seconds:g} s; the command and every "
                "process it started were killed]"
            )
        elif self.returncode < 0:
            notes.append(f"[killed by signal {_signal_name(-self.returncode)}]")
        else:
            notes.append(f"[exit code {self.returncode}]")
        if self.stragglers_stopped:
            notes.append("[processes it left running in the background were stopped]")
        if self.output_abandoned:
            notes.append(
                "[a process outside the command's group kept its output open; "
                "the rest of its output was dropped]"
            )
        body = self.text.removesuffix("\n") or "(no output)"
        return ToolOutput(f"{body}\n" + "\n".join(notes), is_error=self.returncode != 0)


async def run_job(job: BackgroundJob, cap: int, on_output: OutputHook | None = None) -> Finished:
    """Run a background job that Bash made, confined as the call that asked for it was;
    its output, as it is written, to `on_output` too."""
    if job.confinement is not None and not isinstance(job.confinement, Confinement):
        raise TypeError(f"a Bash job's confinement is a Confinement, not {job.confinement!r}")
    try:
        return await run_command(
            job.command, job.cwd, job.timeout_seconds, cap, job.environment, job.confinement,
            on_output,
        )  # fmt: skip
    except ToolError as error:  # nobody is waiting for a raise: the task reads a result
        return Finished(str(error), NOT_STARTED, job.timeout_seconds, False, False)


async def run_command(
    command: str,
    cwd: str,
    time_limit: float,
    cap: int,
    environment: Mapping[str, str] | None = None,
    confinement: Confinement | None = None,
    on_output: OutputHook | None = None,
) -> Finished:
    """Run `command` in `cwd` with `environment` (default: the allowlist, HOME=cwd),
    confined to what `confinement` allows with `cwd` as the workspace (None: unconfined).
    The output's head (what the result keeps of its start) goes to `on_output` as it is
    written, stdout and stderr apart."""
    loop = asyncio.get_running_loop()
    capture = OutputCapture(cap)
    if environment is None:
        environment = tool_environment(cwd)
    shell = [shutil.which("bash") or "/bin/sh", "-c", command]
    proxy: asyncio.Task[None] | None = None
    wrapped = False  # in a sandbox, whose init reports a signal as 128 + its number
    if confinement is None:
        process = _start(shell, cwd, environment)
    else:
        view = await asyncio.to_thread(confinement.view, cwd)  # reads the task's `.git`
        with confinement.prepared(shell, view) as prepared:
            process = _start(prepared.argv, cwd, environment, prepared.enter, prepared.pass_fds)
            wrapped = prepared.argv != shell
            if isinstance(prepared.channel, socket.socket):
                proxy = loop.create_task(serve_proxy(prepared.channel, confinement.fetch_allow))
    group = process.pid  # known before any await, so a cancellation can never miss it
    assert process.stdout is not None and process.stderr is not None
    readers: list[asyncio.BaseTransport] = []
    closed: list[asyncio.Future[None]] = []
    try:
        await read_pipes(process.stdout, process.stderr, capture, on_output, readers, closed)
        exited = _exit_of(loop, process)
        try:
            # shield: a timeout must not cancel the wait for the exit.
            await asyncio.wait_for(asyncio.shield(exited), time_limit)
            timed_out = False
        except TimeoutError:
            timed_out = True
        stragglers = _kill_group(group)
        returncode = await exited
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.gather(*closed)), DRAIN_SECONDS)
            abandoned = False
        except TimeoutError:
            abandoned = True
    except BaseException:
        _kill_group(group)  # cancelled (the claim was lost): the command must not outlive it
        raise
    finally:
        for reader in readers:
            reader.close()
        for pipe in (process.stdout, process.stderr)[len(readers) :]:
            pipe.close()
        if proxy is not None:
            proxy.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await proxy
    if wrapped and 128 < returncode <= 128 + signal.NSIG:
        returncode = 128 - returncode
    return Finished(
        text=capture.text(),
        returncode=None if timed_out else returncode,
        timeout_seconds=time_limit,
        stragglers_stopped=stragglers and not timed_out,
        output_abandoned=abandoned,
    )


def _start(
    argv: Sequence[str],
    cwd: str,
    environment: Mapping[str, str],
    enter: Callable[[], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Fork and exec, as asyncio's own subprocess support does, on the loop's thread (a
    sandbox dies with the thread that started it); `enter`, when given, confines the
    child between the two."""
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            # Two pipes, so readers of a stream tell stdout from stderr; the result keeps
            # both in the order they were read.
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so it can be killed as one
            # Whatever a command prints lands in the task's log: it starts from an
            # allowlist, so the worker's secrets (store DSN, provider keys) are not there.
            env=dict(environment),
            pass_fds=tuple(pass_fds),
            # Safe here: `enter` only calls functions bound before the fork (landlock.py).
            preexec_fn=enter,  # noqa: PLW1509
        )
    except subprocess.SubprocessError as error:  # `enter` failed: nothing was run
        raise ToolError(f"the command could not be confined, so it was not run: {error}") from None


def _exit_of(
    loop: asyncio.AbstractEventLoop, process: subprocess.Popen[bytes]
) -> asyncio.Future[int]:
    """The shell's exit code, from a thread of its own, as asyncio's child watcher does.

    Its own thread, not `to_thread`: a ten-minute command must not hold one of the few
    shared executor threads the file tools need. The shell alone is awaited, not the
    pipe, which a background child may keep open.
    """
    exited: asyncio.Future[int] = loop.create_future()

    def settle(code: int) -> None:
        if not exited.done():
            exited.set_result(code)

    def wait() -> None:
        code = process.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, code)

    threading.Thread(target=wait, name=f"noeta-bash-{process.pid}", daemon=True).start()
    return exited


def _kill_group(group: int) -> bool:
    """SIGKILL every process left in the group; whether there was any."""
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)

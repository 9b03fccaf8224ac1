"""Real `noeta worker` processes forked from one that has made their imports already: a
hundred workers started in turn cost a hundred interpreter starts and imports otherwise
(about 2 s of CPU each on a loaded 2-core machine). Each fork runs the CLI's `main` with
its own arguments, environment and log, takes its own signals and exits with its code;
only the imports are shared. Run as `python -m tests.client.forked_workers`: one JSON line
on stdin per worker ({"argv", "env", "log"}), "started PID" and "exit PID CODE" on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import select
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

# What `noeta worker` imports as it starts (noeta/cli/worker.py's _serve, the store).
_WORKER_IMPORTS = (
    "noeta.backends.models.registry",
    "noeta.backends.stores",
    "noeta.backends.stores.postgres",
    "noeta.cli.worker",
    "noeta.config",
    "noeta.observability",
    "noeta.plugins.toolbox",
    "noeta.worker.append_journal",
    "noeta.worker.worker",
    "tests.client.jobs_for_tests",
)


def _serve() -> None:
    # What a worker imports before and at its first claim, made once, here.
    from noeta.cli.main import main
    from noeta.worker.warmup import _import_what_runs_use

    _import_what_runs_use()
    for name in _WORKER_IMPORTS:
        importlib.import_module(name)

    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        readable, _, _ = select.select([0, woken], [], [])
        if woken in readable:
            os.read(woken, 4096)
            _report_exits()
        if 0 in readable:
            read = os.read(0, 65536)
            if not read:
                return
            pending += read
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    os.close(woken)
                    os.close(wake)
                    _run_worker(json.loads(line), main)
                _say(f"started {pid}")
        _report_exits()


def _report_exits() -> None:
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            _say(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _run_worker(request: dict[str, object], main: object) -> None:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)
    os.environ.update(request["env"])  # type: ignore[arg-type]
    log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.argv = ["noeta", *request["argv"]]  # type: ignore[misc]
    code = 1
    try:
        main()  # type: ignore[operator]
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Forks:
    """The forking process, seen from a test: `start` a worker, know when each exits."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.started: asyncio.Queue[int] = asyncio.Queue()
        self.exits: dict[int, asyncio.Future[int]] = {}
        self.asking = asyncio.Lock()
        self.reading = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls) -> Forks:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.client.forked_workers",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    def _exit_of(self, pid: int) -> asyncio.Future[int]:
        return self.exits.setdefault(pid, asyncio.get_running_loop().create_future())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            what, pid, *code = line.decode().split()
            if what == "started":
                await self.started.put(int(pid))
            else:
                self._exit_of(int(pid)).set_result(int(code[0]))

    async def start(self, argv: list[str], env: Mapping[str, str], log: Path) -> ForkedWorker:
        assert self.process.stdin is not None
        request = {"argv": argv, "env": dict(env), "log": str(log)}
        async with self.asking:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            pid = await asyncio.wait_for(self.started.get(), 300)
        return ForkedWorker(pid, log, self._exit_of(pid))

    async def close(self) -> None:
        for pid, exited in self.exits.items():
            if not exited.done():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        assert self.process.stdin is not None
        self.process.stdin.close()
        await self.process.wait()
        self.reading.cancel()


class ForkedWorker:
    """What the tests use of a `WorkerProcess`: its pid, signals, exit code and log."""

    def __init__(self, pid: int, output: Path, exited: asyncio.Future[int]) -> None:
        self.process = SimpleNamespace(pid=pid)
        self.output = output
        self.exited = exited

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)

    async def exit_code(self, within: float = 30) -> int:
        return await asyncio.wait_for(asyncio.shield(self.exited), within)

    def log(self) -> str:
        return self.output.read_text()


if __name__ == "__main__":
    _serve()

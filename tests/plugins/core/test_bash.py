"""Bash: output, exit codes, caps, odd bytes, and no process outliving its call."""

from __future__ import annotations

import asyncio
import os
import select
import time
from pathlib import Path

import pytest

from noeta.core.ports.payload import JSONValue, decode, encode
from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import Bash
from noeta.plugins.core.command_output import OutputCapture
from noeta.plugins.core.confinement import Confinement

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds")


# The process-group tests read pids, which a PID namespace hides: they run unconfined,
# as with `confine: off`; test_sandbox.py shows the namespace ends every process too.
UNCONFINED = Confinement("off")


def ended(pid: int, within: float = 5.0) -> bool:
    """Whether the process has ended (zombies count), waiting on its pidfd, not polling."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], within)
        return bool(readable)
    finally:
        os.close(pidfd)


async def test_output_and_exit_code(ctx: ToolContext) -> None:
    ok = await Bash().run({"command": "echo out; echo err >&2"}, ctx)
    assert ok.content == "out\nerr\n[exit code 0]"
    assert not ok.is_error
    failed = await Bash().run({"command": "echo nope; exit 3"}, ctx)
    assert failed.content == "nope\n[exit code 3]"
    assert failed.is_error
    silent = await Bash().run({"command": "true"}, ctx)
    assert silent.content == "(no output)\n[exit code 0]"


async def test_runs_in_the_workspace(workspace: Path, ctx: ToolContext) -> None:
    output = await Bash().run({"command": "pwd; echo hi > made.txt"}, ctx)
    assert output.content.splitlines()[0] == str(workspace)
    assert (workspace / "made.txt").read_text() == "hi\n"


async def test_killed_by_a_signal(ctx: ToolContext) -> None:
    output = await Bash().run({"command": "kill -TERM $$"}, ctx)
    assert output.content.endswith("[killed by signal SIGTERM]")
    assert output.is_error


async def test_nul_and_invalid_utf8_are_readable_and_storable(ctx: ToolContext) -> None:
    output = await Bash().run({"command": r"printf 'a\x00b\xff\xfe\n'; printf 'caf\xc3\xa9'"}, ctx)
    assert output.content == "a\\x00b\\xff\\xfe\ncafé\n[exit code 0]"
    assert decode(encode(output.content)) == output.content


def test_a_utf8_character_split_across_reads_survives() -> None:
    capture = OutputCapture(100)
    capture.add(b"caf\xc3")
    capture.add(b"\xa9 \xc3")
    assert capture.text() == "café \\xc3"  # an unfinished character at the end is escaped


async def test_output_cap_keeps_head_and_tail(ctx: ToolContext) -> None:
    output = await Bash(output_cap_chars=1000).run({"command": "seq 1 100000"}, ctx)
    text = output.content
    assert text.startswith("1\n2\n3\n")
    assert text.endswith("99999\n100000\n[exit code 0]")
    total = sum(len(f"{n}\n") for n in range(1, 100001))
    assert f"[… {total - 1000:,} of {total:,} characters cut from the middle …]" in text
    assert len(text) < 1200


async def test_timeout_kills_the_whole_process_group(ctx: ToolContext) -> None:
    started = time.monotonic()
    output = await Bash(confinement=UNCONFINED).run(
        {"command": "echo $$; sleep 30 & echo $!; sleep 30", "timeout_seconds": 0.5}, ctx
    )
    assert time.monotonic() - started < 10
    assert output.is_error
    assert output.content.endswith(
        "[timed out after 0.5 s; the command and every process it started were killed]"
    )
    shell, background = (int(line) for line in output.content.splitlines()[:2])
    assert ended(shell)
    assert ended(background)


async def test_background_processes_are_stopped_when_the_command_ends(
    ctx: ToolContext,
) -> None:
    output = await Bash(confinement=UNCONFINED).run({"command": "sleep 30 & echo $!"}, ctx)
    lines = output.content.splitlines()
    assert lines[1:] == [
        "[exit code 0]",
        "[processes it left running in the background were stopped]",
    ]
    assert ended(int(lines[0]))


async def test_cancelling_the_call_kills_the_group(workspace: Path, ctx: ToolContext) -> None:
    fifo = workspace / "started"
    os.mkfifo(fifo)
    command = {"command": "sleep 30 & echo $! > started; wait"}
    call = asyncio.ensure_future(Bash(confinement=UNCONFINED).run(command, ctx))
    # Opening a FIFO for reading blocks until the command opens it for writing.
    background = int(await asyncio.to_thread(fifo.read_text))
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert ended(background)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"timeout_seconds": 601}, "at most 600"),
        ({"timeout_seconds": 0}, "above 0"),
        ({"timeout_seconds": "5"}, "must be a number"),
        ({"timeout": 5}, "unknown input 'timeout'"),
    ],
)
async def test_input_is_checked(extra: dict[str, JSONValue], reason: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=reason):
        await Bash().run({"command": "true", **extra}, ctx)


WORKER_SECRETS = {
    "NOETA_STORE": "postgresql://noeta:hunter2-store@db/noeta",
    "DATABASE_URL": "postgresql://app:dburl-secret@db/app",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "PGPASSWORD": "pg-secret",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer otlp-header-secret",
    "HTTPS_PROXY": "http://user:proxy-secret@proxy.internal:3128",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent-socket-secret",
}


async def test_a_command_gets_an_allowlisted_environment_not_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLAIN_SETTING", "not-listed")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    ctx = ToolContext("t", "c", workspace=str(tmp_path))
    output = await Bash().run({"command": "env"}, ctx)
    shown = dict(line.split("=", 1) for line in output.content.splitlines()[:-1] if "=" in line)
    for value in (*WORKER_SECRETS.values(), "not-listed"):
        assert value not in output.content
    assert shown["HOME"] == str(tmp_path)
    assert shown["PATH"] and shown["LANG"] == "C.UTF-8" and shown["LC_TIME"] == "C"


async def test_names_the_operator_lists_are_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-operator-chose-this")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    ctx = ToolContext("t", "c", workspace=str(tmp_path))
    output = await Bash(pass_env=("GITHUB_TOKEN", "NOT_SET_ANYWHERE")).run({"command": "env"}, ctx)
    assert "GITHUB_TOKEN=ghp-operator-chose-this" in output.content
    assert "sk-ant-secret" not in output.content and "NOT_SET_ANYWHERE" not in output.content

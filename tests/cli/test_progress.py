"""The live status line as a user sees it: the real `noeta` executable on a real
pseudo-terminal (drawn in place, then cleared before the answer), and on pipes (nothing
but the answer on stdout, no status text on stderr)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from noeta.cli.status_line import CLEAR

ANSWER = "The workspace holds notes.txt, which says hello."
# Three steps: a Bash call, a reply refused once with 429 then a Read call, the answer.
THREE_STEPS = f"""
replies:
  - text: "Let me look."
    tool_calls:
      - {{id: call-1, name: Bash, input: {{command: "echo hello > notes.txt; ls"}}}}
  - text: "Now the file."
    fail_first:
      - {{status: 429, retry_after: 0, message: "rate limited"}}
    tool_calls:
      - {{id: call-2, name: Read, input: {{file_path: "notes.txt"}}}}
  - text: "{ANSWER}"
"""
OUTPUT_DEADLINE_SECONDS = 60.0  # a bound on a wait for output, never a synchronisation


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "three-steps.yaml"
    path.write_text(THREE_STEPS)
    return path


def environment(tmp_path: Path) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {
        **kept,
        "NOETA_STORE": f"sqlite:///{tmp_path / 'noeta.db'}",
        "NOETA_HOME": str(tmp_path),
        "TERM": "xterm",  # whatever terminal (or none, or a dumb one) the tests run from
    }


class Terminal:
    """The real `noeta` with stdout and stderr on one pseudo-terminal of `columns`."""

    def __init__(self, arguments: list[str], env: dict[str, str], cwd: Path, columns: int) -> None:
        self.master, child = os.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "noeta", *arguments],
            stdin=subprocess.DEVNULL,
            stdout=child,
            stderr=child,
            env=env,
            cwd=cwd,
        )
        os.close(child)
        self.output = b""

    def read_until(self, wanted: bytes | None) -> bytes:
        """What the terminal shows until `wanted` has appeared (None: until the end)."""
        deadline = time.monotonic() + OUTPUT_DEADLINE_SECONDS
        while wanted is None or wanted not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {wanted!r} within the deadline: {self.output!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError as error:  # EIO: every writer of the terminal is gone
                assert error.errno == errno.EIO
                chunk = b""
            if not chunk:
                assert wanted is None, f"the output ended before {wanted!r}: {self.output!r}"
                break
            self.output += chunk
        return self.output

    def finish(self) -> tuple[int, str]:
        self.read_until(None)
        code = self.process.wait(timeout=OUTPUT_DEADLINE_SECONDS)
        os.close(self.master)
        return code, self.output.decode()


def drawn(output: str) -> list[str]:
    """Each state of the status line, in order: the text after each clear."""
    states = [part.split("\r")[0] for part in output.split(CLEAR)[1:-1]]
    return [state for state in states if state]


def test_a_run_on_a_terminal_shows_each_step_in_place_and_clears_it_before_the_answer(
    tmp_path: Path, script: Path
) -> None:
    run = ["run", "Look around.", "--model", f"scripted:{script}", "--id", "demo"]
    terminal = Terminal(run, environment(tmp_path), tmp_path, columns=200)
    code, output = terminal.finish()
    assert code == 0, output
    states = drawn(output)
    expected = [
        "turn 1 step 1 | model call",
        "turn 1 step 1 | tool Bash",
        "turn 1 step 2 | model call",
        "| HTTP 429, attempt 2/9",
        "turn 1 step 2 | tool Read",
        "turn 1 step 3 | model call",
    ]
    found = [next((i for i, s in enumerate(states) if want in s), -1) for want in expected]
    assert -1 not in found and found == sorted(found), states
    # Cleared before the answer: nothing drawn between the last clear and the answer.
    before, _, after = output.partition(ANSWER)
    assert before.endswith(CLEAR), output
    assert after == "\r\ntask demo: done\r\n", output
    assert "retrying in" not in output  # the retry is in the line, not printed through it


def test_on_a_narrow_terminal_the_line_is_cut_to_its_width(tmp_path: Path, script: Path) -> None:
    run = ["run", "Look around.", "--model", f"scripted:{script}", "--id", "narrow"]
    terminal = Terminal(run, environment(tmp_path), tmp_path, columns=30)
    code, output = terminal.finish()
    assert code == 0, output
    states = drawn(output)
    assert states and all(len(state) <= 29 for state in states), states
    # "turn 1 step 1 | tool Bash 0.0s" is 30 cells: cut, not wrapped onto a new line.
    assert any(s.startswith("turn 1 step 1 | tool Bash ") and len(s) == 29 for s in states)


@pytest.mark.parametrize(
    ("option", "term"), [("--no-progress", "xterm"), ("--quiet", "xterm"), ("--json", "dumb")]
)
def test_on_a_terminal_no_progress_quiet_or_a_dumb_terminal_draw_nothing(
    tmp_path: Path, script: Path, option: str, term: str
) -> None:
    run = ["run", "Look around.", "--model", f"scripted:{script}"]
    env = environment(tmp_path) | {"TERM": term}
    terminal = Terminal([*run, option], env, tmp_path, columns=200)
    code, output = terminal.finish()
    assert code == 0 and CLEAR not in output and "turn 1" not in output, output


def piped(arguments: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noeta", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(tmp_path),
        cwd=tmp_path,
        check=False,
    )


RETRY_LINE = "task {id}: scripted model call attempt 1 of 9 failed (HTTP 429); retrying in 0.0 s"


def test_piped_stdout_is_the_answer_alone_and_stderr_has_no_status_text(
    tmp_path: Path, script: Path
) -> None:
    run = ["run", "Look around.", "--model", f"scripted:{script}"]
    result = piped([*run, "--id", "p1"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ANSWER + "\n"
    # The retry's log line (it is a warning), then the outcome: nothing drawn.
    assert result.stderr.splitlines() == [RETRY_LINE.format(id="p1"), "task p1: done"]
    assert "\r" not in result.stderr and "\x1b" not in result.stderr

    as_json = piped([*run, "--id", "p2", "--json"], tmp_path)
    assert json.loads(as_json.stdout) == {
        "id": "p2",
        "status": "done",
        "answer": ANSWER,
        "error": "",
    }
    quiet = piped([*run, "--id", "p3", "--quiet"], tmp_path)
    assert quiet.stdout == ANSWER + "\n"
    assert quiet.stderr.splitlines() == [RETRY_LINE.format(id="p3")]


def test_tail_on_a_terminal_shows_the_wait_under_the_events_and_clears_it(
    tmp_path: Path,
) -> None:
    """An interactive task no worker runs: it waits for a message; Ctrl-C ends the tail."""
    env = environment(tmp_path)
    (tmp_path / "x.yaml").write_text("replies:\n  - text: hello\n")  # submit reads it now
    submitted = piped(
        ["submit", "--interactive", "--model", "scripted:x.yaml", "--id", "i"], tmp_path
    )
    assert submitted.returncode == 0, submitted.stderr
    terminal = Terminal(["tail", "i"], env, tmp_path, columns=200)
    terminal.read_until(b"waiting for a message")
    terminal.process.send_signal(signal.SIGINT)
    code, output = terminal.finish()
    assert code == 130, output
    assert output.index("created") < output.index("waiting for a message")
    assert output.endswith(CLEAR), output  # the line is gone when the tail ends

    piped_tail = piped(["tail", "i", "--no-follow", "--json"], tmp_path)
    assert [json.loads(line)["type"] for line in piped_tail.stdout.splitlines()] == ["TaskCreated"]
    assert piped_tail.stderr == ""


def test_tail_follows_a_task_a_worker_runs_and_names_its_tool_live(tmp_path: Path) -> None:
    """The worker's Bash call blocks until the test has seen it on the tail's line."""
    env = environment(tmp_path) | {"NOETA_HOME": str(tmp_path / "home")}
    script = tmp_path / "blocked.yaml"
    script.write_text(
        "replies:\n"
        "  - tool_calls:\n"
        "      - {id: c1, name: Bash, input: {command: 'until [ -e go ]; do sleep 0.05; done'}}\n"
        "  - text: went\n"
    )
    submit = ["submit", "Wait for it.", "--model", f"scripted:{script}", "--id", "live"]
    assert piped(submit, tmp_path).returncode == 0
    worker = subprocess.Popen(
        [sys.executable, "-m", "noeta", "worker"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        terminal = Terminal(["tail", "live"], env, tmp_path, columns=200)
        terminal.read_until(b"turn 1 step 1 | tool Bash")
        # The tail can show the call (its ToolStarted) before Bash has made the folder.
        workspace = tmp_path / "home-workspaces" / "live"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "go").touch()
        code, output = terminal.finish()
    finally:
        worker.terminate()
        worker.wait(timeout=OUTPUT_DEADLINE_SECONDS)
    assert code == 0, output
    # The step (its title), then the status line naming the call in flight, then the result.
    started, in_flight = output.index("tool Bash (c1)"), output.index("| tool Bash")
    assert started < in_flight < output.index("tool result (c1)")
    last_line = output.rsplit("\n", 1)[1]
    assert last_line.rsplit(CLEAR, 1)[-1] == "", output  # nothing left drawn at the end

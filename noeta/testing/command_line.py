"""Running `noeta` in tests: as the docs recommend (the store URL, whose password would be
readable by every local process on the command line, goes in NOETA_STORE instead), and
in the test's own process where a new one proves nothing."""

from __future__ import annotations

import os
import subprocess
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from click.testing import Result


def store_in_environment(
    arguments: Sequence[str], environment: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """`arguments` without their `--store URL` pair, and `environment` with NOETA_STORE=URL."""
    given, moved = list(arguments), dict(environment)
    while "--store" in given:
        at = given.index("--store")
        moved["NOETA_STORE"] = given[at + 1]
        del given[at : at + 2]
    return given, moved


def run_in_process(
    arguments: Sequence[str], environment: Mapping[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`noeta ARGUMENTS` run by this process, as a real one would run it with exactly
    `environment`: its exit code, stdout and stderr (a traceback in stderr, as Python would
    print it, if an exception escaped). The same entry point as the `noeta` executable,
    without a new interpreter's start (about a second of CPU on a loaded 2-core machine);
    for the commands that end by themselves. The command runs on a thread of its own, so
    its `asyncio.run` neither meets a running test loop nor unsets the thread's loop; the
    environment is this process's for the run, then restored."""
    from click.testing import CliRunner

    from noeta.cli.main import cli

    outcome: list[Result] = []
    saved, wanted = dict(os.environ), dict(environment)  # `environment` may be os.environ
    os.environ.clear()
    os.environ.update(wanted)
    try:
        runner = threading.Thread(
            target=lambda: outcome.append(
                CliRunner().invoke(cli, list(arguments), input=stdin, prog_name="noeta")
            )
        )
        runner.start()
        runner.join()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    [result] = outcome
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(
        ["noeta", *arguments], result.exit_code, result.stdout, stderr
    )

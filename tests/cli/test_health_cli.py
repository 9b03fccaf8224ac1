"""`--health` given an address it cannot use, and `--check` of a store that does not
answer, on the real executables: one line on stderr, exit 1, before anything starts."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from noeta.testing.command_line import run_in_process


@pytest.fixture(scope="module")
def taken() -> Iterator[str]:
    """An address another process listens on."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield f"127.0.0.1:{listening.getsockname()[1]}"


def noeta(
    tmp_path: Path, *arguments: str, store: str | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "OTEL_"))}
    environment["NOETA_STORE"] = store or f"sqlite:///{tmp_path / 'noeta.db'}"
    return run_in_process(arguments, environment)


@pytest.mark.parametrize("command", [["worker"], ["scheduler"], ["web", "--bind", "127.0.0.1:0"]])
def test_health_on_an_address_in_use_is_one_line_and_exit_1(
    tmp_path: Path, taken: str, command: list[str]
) -> None:
    result = noeta(tmp_path, *command, "--health", taken)
    assert (result.returncode, result.stdout) == (1, "")
    assert (
        result.stderr
        == f"noeta: error: --health: cannot listen on {taken}: the address is in use\n"
    )
    assert not (tmp_path / "noeta.db").exists()  # refused before the store was opened


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_check_of_a_store_that_does_not_answer_is_one_line_and_exit_1(
    tmp_path: Path, command: str
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://noeta:secret-password@127.0.0.1:{port}/noeta"
    result = noeta(tmp_path, command, "--check", store=url)
    assert (result.returncode, result.stdout) == (1, "")
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("noeta: not ready: store: cannot connect to PostgreSQL")
    assert "secret-password" not in result.stderr


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:70000", "127.0.0.1:", "[::1]:x"])
def test_a_bad_health_address_is_one_line_and_exit_1(tmp_path: Path, address: str) -> None:
    result = noeta(tmp_path, "worker", "--health", address)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"noeta: error: --health takes HOST:PORT (e.g. 127.0.0.1:9464), not {address!r}\n"
    )
